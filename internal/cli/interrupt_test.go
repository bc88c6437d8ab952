package cli

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vastrun/vastrun/internal/progress"
)

// lineWriter keeps what is written and tells of each write.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWriter) waitFor(t *testing.T, s string) {
	t.Helper()
	for {
		w.mu.Lock()
		got := w.buf.String()
		w.mu.Unlock()
		if strings.Contains(got, s) {
			return
		}
		<-w.wrote
	}
}

// TestSignals: the first signal cancels and says what the run is
// stopping; a SIGTERM after it never leaves (CI sends SIGINT, then
// SIGTERM, and the teardown must go on); a second SIGINT leaves, exit 7,
// with the instance and the command that finishes the teardown.
func TestSignals(t *testing.T) {
	out := &lineWriter{wrote: make(chan struct{}, 1)}
	f := &Factory{IO: NewIOStreams(nil, io.Discard, out)}
	f.watchRun(nil).Observe(progress.Event{Phase: progress.PhaseTest, Run: "mx1run", Instance: 30511001})
	cancelled := make(chan struct{})
	exited := make(chan int, 1)
	stop := f.watchSignals(func() { close(cancelled) }, func(code int) { exited <- code })
	defer stop()

	syscall.Kill(os.Getpid(), syscall.SIGINT)
	<-cancelled
	out.waitFor(t, "stopping: destroying instance 30511001 and confirming; Ctrl-C again to leave it to `vastrun down --run mx1run --yes`")

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	out.waitFor(t, "still stopping: the teardown goes on")
	select {
	case code := <-exited:
		t.Fatalf("a SIGTERM after the first signal left (exit %d): the teardown must go on", code)
	default:
	}

	syscall.Kill(os.Getpid(), syscall.SIGINT)
	if code := <-exited; code != ExitUnconfirmed {
		t.Fatalf("exit %d, want %d", code, ExitUnconfirmed)
	}
	out.waitFor(t, "leaving instance 30511001 of run mx1run without confirming its destruction")
	out.waitFor(t, "hint: finish the teardown with: vastrun down --run mx1run --yes")
}

func TestLeavingBeforeAnythingIsRented(t *testing.T) {
	for _, ev := range []progress.Event{{}, {Phase: progress.PhaseSelect, Run: "r"}, {Phase: progress.PhaseDone, Run: "r", Instance: 7}} {
		if l := stoppingLine(ev); l != "" {
			t.Errorf("%+v: stopping line %q, want none", ev, l)
		}
		if lines, hs, code := leaving(ev, false); code != ExitInterrupted || len(hs) != 0 || !strings.Contains(lines[0], "nothing was rented") {
			t.Errorf("%+v: %q %q exit %d", ev, lines, hs, code)
		}
	}
	// A create whose answer is not in yet may have rented: down finds it by the journal.
	lines, hs, code := leaving(progress.Event{Phase: progress.PhaseRent, Run: "r"}, false)
	if code != ExitUnconfirmed || !strings.Contains(lines[0], "its id is not known yet") || hs[0] != "finish the teardown with: vastrun down --run r --yes" {
		t.Errorf("%q %q exit %d", lines, hs, code)
	}
}
