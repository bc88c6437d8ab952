package cli

import (
	"errors"
	"os"

	"golang.org/x/term"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/progress"
)

// progressMode picks how live progress is shown: a redrawn status line on
// a terminal, else plain lines (folded per phase on GitHub and GitLab).
func progressMode(s *IOStreams, quiet bool, env cienv.Env) progress.Mode {
	switch {
	case quiet:
		return progress.ModeQuiet
	case s.ErrTTY:
		return progress.ModeTerminal
	case env.System == "github":
		return progress.ModeGitHub
	case env.System == "gitlab":
		return progress.ModeGitLab
	}
	return progress.ModePlain
}

// startProgress starts the live display of a workflow run; lines for
// people go through it until the factory closes.
func (f *Factory) startProgress(env cienv.Env) *progress.Display {
	if f.IO.display != nil {
		return f.IO.display
	}
	mode := progressMode(f.IO, f.Quiet, env)
	red := f.IO.Redactor()
	speed := 0.0
	if sc, ok := f.clock().(*clock.Scaled); ok {
		speed = sc.Factor // the embedded simulator's clock: people read wall time
	}
	d := progress.New(progress.Options{
		Out: f.IO.ErrOut, Clock: f.clock(), Mode: mode, Speed: speed,
		Color:  mode == progress.ModeTerminal && f.Getenv("NO_COLOR") == "" && f.Getenv("TERM") != "dumb",
		Width:  func() int { return errWidth(f.IO) },
		Redact: red.String,
	})
	f.IO.mu.Lock()
	f.IO.display = d
	f.IO.mu.Unlock()
	return d
}

func (s *IOStreams) progress() *progress.Display {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.display
}

// stopProgress clears the status line and hands stderr back.
func (f *Factory) stopProgress() {
	d := f.IO.progress()
	if d == nil {
		return
	}
	d.Close()
	f.IO.mu.Lock()
	f.IO.display = nil
	f.IO.mu.Unlock()
}

func errWidth(s *IOStreams) int {
	if fl, ok := s.ErrOut.(*os.File); ok {
		if w, _, err := term.GetSize(int(fl.Fd())); err == nil {
			return w
		}
	}
	return 0
}

// annotateFailure marks a failed run for the CI system (an ::error::
// annotation on GitHub). An unconfirmed cleanup is annotated by teardown
// itself, and a no at the prompt is no failure.
func annotateFailure(f *Factory, err error) {
	d := f.IO.progress()
	if d == nil || err == nil || errors.As(err, new(*lifecycle.CleanupError)) || errors.As(err, new(*CancelledError)) {
		return
	}
	d.Annotate("error", err.Error())
}
