package cli

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/term"

	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/redact"
)

// IOStreams carries the process's streams. Output rules: stdout is data
// (with --json, one versioned JSON document); stderr is for people, every
// line prefixed "vastrun: "; developer logs appear only with --debug.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// OutTTY, InTTY and ErrTTY say whether stdout/stdin/stderr are terminals.
	OutTTY, InTTY, ErrTTY bool
	// display, while a run shows live progress, takes every line for
	// people so that its status line is cleared before them.
	display *progress.Display

	// redactor masks every line for people; the engine shares it, so a
	// secret it learns is masked here too.
	mu       sync.Mutex
	redactor *redact.Redactor
}

// Redactor is the process's shared redactor.
func (s *IOStreams) Redactor() *redact.Redactor {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.redactor == nil {
		s.redactor = redact.New()
	}
	return s.redactor
}

// NewIOStreams wraps the given streams, detecting terminals.
func NewIOStreams(in io.Reader, out, errOut io.Writer) *IOStreams {
	return &IOStreams{In: in, Out: out, ErrOut: errOut, OutTTY: isTerminal(out), InTTY: isTerminal(in), ErrTTY: isTerminal(errOut)}
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Infof prints a line for people on stderr.
func (s *IOStreams) Infof(format string, args ...any) {
	if d := s.progress(); d != nil {
		d.Line(s.Redactor().String(fmt.Sprintf(format, args...)))
		return
	}
	io.WriteString(s.ErrOut, s.Redactor().String(fmt.Sprintf("vastrun: "+format+"\n", args...))) //nolint:errcheck // stderr is for people: a refused write cannot be reported
}

// Hintf prints a "hint:" line suggesting how to fix a problem.
func (s *IOStreams) Hintf(format string, args ...any) {
	if d := s.progress(); d != nil {
		d.Line(s.Redactor().String(fmt.Sprintf("hint: "+format, args...)))
		return
	}
	io.WriteString(s.ErrOut, s.Redactor().String(fmt.Sprintf("vastrun: hint: "+format+"\n", args...))) //nolint:errcheck // as Infof's
}
