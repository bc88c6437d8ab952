package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

var errDiskFull = errors.New("no space left on device")

// fullFrom fills the disk from the first record that match picks: that
// write and every later one fail, as on a disk that stays full.
func fullFrom(match func(journal.Record) bool) func(journal.Record) error {
	full := false
	return func(r journal.Record) error {
		if full || match(r) {
			full = true
			return errDiskFull
		}
		return nil
	}
}

// A full disk at the rent intent: the create is never sent.
func TestJournalFullAtRentIntentRentsNothing(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	h.engine.JournalFault = fullFrom(func(r journal.Record) bool { return r.Type == "intent" && r.Step == "rent" })
	r, err := ci.Run(context.Background(), h.engine)
	if !errors.Is(err, lifecycle.ErrJournal) || !errors.Is(err, errDiskFull) {
		t.Fatalf("err %v, want the journal error", err)
	}
	if st := h.sim.Snapshot(); len(st.Live)+len(st.Gone) != 0 {
		t.Fatalf("rented without a journaled intent: %+v", st)
	}
	if r == nil || r.Outcome == lifecycle.OutcomePassed {
		t.Fatalf("receipt: %+v", r)
	}
}

// A full disk at the test's intent: the test never runs, and the rented
// instance is still destroyed and confirmed (teardown does not need the
// journal to destroy; the receipt says what happened).
func TestJournalFullAtWorkIntentStopsAndTearsDown(t *testing.T) {
	cfg := strings.Replace(baseConfig, "test: sh scripts/gpu-test.sh", `test: touch "$HOME/../workspace/the-test-ran"; sh scripts/gpu-test.sh`, 1)
	h := newHarness(t, cfg, true)
	h.engine.JournalFault = fullFrom(func(r journal.Record) bool { return r.Type == "intent" && r.Step == "work" })
	r, err := ci.Run(context.Background(), h.engine)
	if !errors.Is(err, lifecycle.ErrJournal) {
		t.Fatalf("err %v, want the journal error", err)
	}
	h.noLeaks()
	st := h.sim.Snapshot()
	if len(st.Gone) != 1 {
		t.Fatalf("rentals: %+v", st)
	}
	if _, serr := os.Stat(filepath.Join(st.Gone[0].Sandbox, "workspace", "the-test-ran")); serr == nil {
		t.Fatal("the test ran although its intent could not be journaled")
	}
	if r == nil || r.Outcome != lifecycle.OutcomeError || !r.Cleanup.Confirmed {
		t.Fatalf("receipt: %+v (cleanup %+v)", r, r.Cleanup)
	}
	// The journal ends at the last record the disk took: nothing torn.
	recs, jerr := journal.Read(h.engine.RunDir())
	if jerr != nil || len(recs) == 0 || recs[len(recs)-1].Type == "intent" && recs[len(recs)-1].Step == "work" {
		t.Fatalf("journal after the disk filled: %v, last %+v", jerr, recs[len(recs)-1])
	}
}

// A full disk at `down`'s destroy intent: the instance is still destroyed
// and confirmed (destroying is the safe side), but down fails on the
// journal error: its journal never learned the instance is gone.
func TestJournalFullAtDestroyFailsDown(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	if _, err := ci.Up(context.Background(), h.engine); err != nil {
		t.Fatal(err)
	}
	h.engine.JournalFault = fullFrom(func(r journal.Record) bool { return r.Type == "intent" && r.Step == "destroy" })
	e := *h.engine
	if err := e.Open(h.engine.RunDir()); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err := e.Down(context.Background())
	if !errors.Is(err, lifecycle.ErrJournal) || !errors.Is(err, errDiskFull) {
		t.Fatalf("down: %v, want the journal error", err)
	}
	h.noLeaks()
}
