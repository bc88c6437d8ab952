package cli

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams carries the process's streams. Output rules: stdout is data
// (with --json, one versioned JSON document); stderr is for people, every
// line prefixed "vastrun: "; developer logs appear only with --debug.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// OutTTY and InTTY say whether stdout/stdin are terminals.
	OutTTY, InTTY bool
}

// NewIOStreams wraps the given streams, detecting terminals.
func NewIOStreams(in io.Reader, out, errOut io.Writer) *IOStreams {
	return &IOStreams{In: in, Out: out, ErrOut: errOut, OutTTY: isTerminal(out), InTTY: isTerminal(in)}
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Infof prints a line for people on stderr.
func (s *IOStreams) Infof(format string, args ...any) {
	fmt.Fprintf(s.ErrOut, "vastrun: "+format+"\n", args...)
}

// Hintf prints a "hint:" line suggesting how to fix a problem.
func (s *IOStreams) Hintf(format string, args ...any) {
	fmt.Fprintf(s.ErrOut, "vastrun: hint: "+format+"\n", args...)
}
