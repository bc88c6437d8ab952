package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Ctrl-C at every moment (docs/exit-codes.md):
//
//   - The first SIGINT or SIGTERM cancels the command: a prompt ends at
//     once (nothing rented), a run tears down what it rented on a context
//     of its own, and says what it is doing.
//   - A second SIGINT leaves at once, naming the instance it leaves and
//     the command that finishes the teardown. A SIGTERM never does: CI
//     systems send SIGINT and then SIGTERM seconds later (GitHub Actions:
//     7.5 s), and the teardown must go on until it is confirmed.
//
// Nobody reads Go's "context canceled": a run's error says what it was
// doing (lifecycle.InterruptedError), and whatever else a signal stopped
// says "interrupted".

// runWatch is what the running workflow holds, as its progress events
// tell it: the signal handler reads it from its own goroutine.
type runWatch struct {
	mu   sync.Mutex
	ev   progress.Event
	next progress.Observer
}

// Observe records ev and passes it on to the display.
func (w *runWatch) Observe(ev progress.Event) {
	w.mu.Lock()
	w.ev = ev
	w.mu.Unlock()
	if w.next != nil {
		w.next.Observe(ev)
	}
}

func (w *runWatch) last() progress.Event {
	if w == nil {
		return progress.Event{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ev
}

// watchRun puts the factory's runWatch in front of the engine's observer.
func (f *Factory) watchRun(next progress.Observer) progress.Observer {
	f.runMu.Lock()
	defer f.runMu.Unlock()
	f.run = &runWatch{next: next}
	return f.run
}

func (f *Factory) lastRunEvent() progress.Event {
	f.runMu.Lock()
	w := f.run
	f.runMu.Unlock()
	return w.last()
}

// rentedNow reports whether ev's run may hold a rental: one it knows by
// id, or a create whose answer is not in yet.
func rentedNow(ev progress.Event) bool {
	switch ev.Phase {
	case "", progress.PhasePrepare, progress.PhaseSelect, progress.PhaseDone:
		return false
	}
	return true
}

// downCommand is what finishes a run's teardown, by its journal.
func downCommand(ev progress.Event) string {
	if ev.Run == "" {
		return "vastrun down --all --yes"
	}
	return "vastrun down --run " + ev.Run + " --yes"
}

// stoppingLine says what the first signal does; "" when nothing is rented.
func stoppingLine(ev progress.Event) string {
	if !rentedNow(ev) {
		return ""
	}
	what := "destroying what was rented"
	if ev.Instance != 0 {
		what = fmt.Sprintf("destroying instance %d", ev.Instance)
	}
	return fmt.Sprintf("stopping: %s and confirming; Ctrl-C again to leave it to `%s`", what, downCommand(ev))
}

// leaving is what a second SIGINT says on its way out, and its exit code:
// ExitUnconfirmed when a rental may still bill, else ExitInterrupted.
func leaving(ev progress.Event, sim bool) (lines, hintLines []string, code int) {
	if !rentedNow(ev) {
		return []string{"interrupted again: leaving now; nothing was rented"}, nil, ExitInterrupted
	}
	what := "the rental whose create was sent (its id is not known yet)"
	if ev.Instance != 0 {
		what = fmt.Sprintf("instance %d", ev.Instance)
	}
	if sim {
		return []string{fmt.Sprintf("interrupted again: leaving %s of run %s to the embedded simulator, which ends with vastrun: nothing bills", what, ev.Run)}, nil, ExitInterrupted
	}
	return []string{fmt.Sprintf("interrupted again: leaving %s of run %s without confirming its destruction: it may still be billing", what, ev.Run)},
		[]string{"finish the teardown with: " + downCommand(ev)}, ExitUnconfirmed
}

// watchSignals turns SIGINT and SIGTERM into cancel (the first) and into
// leaving at once through exit (a second SIGINT). stop ends the watch.
func (f *Factory) watchSignals(cancel context.CancelFunc, exit func(int)) (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		first := true
		for {
			var sig os.Signal
			select {
			case <-done:
				return
			case sig = <-ch:
			}
			ev := f.lastRunEvent()
			switch {
			case first:
				first = false
				if l := stoppingLine(ev); l != "" {
					f.IO.Infof("%s", l)
				}
				cancel()
			case sig == os.Interrupt:
				lines, hs, code := leaving(ev, f.Sim && f.URL == "")
				for _, l := range lines {
					f.IO.Infof("%s", l)
				}
				for _, h := range hs {
					f.IO.Hintf("%s", h)
				}
				f.stopProgress()
				exit(code)
				return
			default: // SIGTERM after the first signal: the teardown goes on
				f.IO.Infof("still stopping: the teardown goes on until it is confirmed (a second Ctrl-C leaves it to `%s`)", downCommand(ev))
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// interruptedError is how a command a signal stopped ends when it has no
// words of its own: "interrupted", never "context canceled". It is
// context.Canceled (errors.Is), so it exits ExitInterrupted unless
// something weightier (an unconfirmed cleanup) is joined to it.
type interruptedError struct {
	msg string
	err error
}

func (e *interruptedError) Error() string { return e.msg }
func (e *interruptedError) Unwrap() error { return e.err }

// asInterrupted words err, which ended a command that a signal stopped.
// A no at a prompt, and a run's own words (lifecycle.InterruptedError),
// stay as they are.
func asInterrupted(err error) error {
	var words *lifecycle.InterruptedError
	switch {
	case errors.As(err, new(*CancelledError)), errors.Is(err, lifecycle.ErrDeclined), errors.As(err, new(*interruptedError)),
		errors.As(err, new(*lifecycle.CleanupError)): // its own words, and exit 7
		return err
	case errors.As(err, &words):
		return &interruptedError{msg: words.Error(), err: err}
	}
	return &interruptedError{msg: "interrupted", err: errors.Join(context.Canceled, err)}
}

// interruptedRun says how an interrupted run ended, from its receipt: what
// it was doing, what became of its rentals, and for training how to go on.
func interruptedRun(o *WorkflowOptions, r *receipt.Receipt, err error) error {
	if !errors.Is(err, context.Canceled) || errors.As(err, new(*lifecycle.CleanupError)) || r == nil {
		return err
	}
	msg := "interrupted"
	var words *lifecycle.InterruptedError
	if errors.As(err, &words) {
		msg = words.Error()
	}
	var ids []string
	for _, a := range r.Attempts {
		if a.InstanceID != 0 {
			ids = append(ids, fmt.Sprint(a.InstanceID))
		}
	}
	switch {
	case len(ids) == 0:
		msg += " — nothing rented"
	case r.Cleanup.Confirmed && len(ids) == 1:
		msg += fmt.Sprintf(": instance %s destroyed (confirmed)", ids[0])
	case r.Cleanup.Confirmed:
		msg += fmt.Sprintf(": instances %s destroyed (confirmed)", strings.Join(ids, ", "))
	}
	out := error(&interruptedError{msg: msg, err: err})
	if r.Workflow == "train" && r.RunID != "" {
		out = &hintedError{err: out, hint: fmt.Sprintf("continue from its last checkpoint with: vastrun resume %s --yes -f %s", r.RunID, o.ConfigPath)}
	}
	return out
}
