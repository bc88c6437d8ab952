package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// OutcomeCancelled is a run whose plan the person declined at the prompt.
const OutcomeCancelled = receipt.Cancelled

// ErrDeclined is what an Approve func returns when the person answered no:
// it is a choice, not a failure, and nothing was rented.
var ErrDeclined = errors.New("cancelled — nothing rented")

// InterruptedError is a run a signal stopped (Ctrl-C, a CI cancellation),
// in the words a person reads: what the run was doing, never Go's
// "context canceled". It is context.Canceled (errors.Is), so the outcome
// stays interrupted.
type InterruptedError struct {
	During string // e.g. "testing on instance 7"; "" when unknown
	Err    error
}

func (e *InterruptedError) Error() string {
	if e.During == "" {
		return "interrupted"
	}
	return "interrupted while " + e.During
}

func (e *InterruptedError) Unwrap() error { return e.Err }

// asInterrupted words err when it is a signal's cancellation.
func asInterrupted(e *Scope, err error) error {
	if err == nil || !errors.Is(err, context.Canceled) || errors.As(err, new(*InterruptedError)) {
		return err
	}
	during := ""
	if ph := e.lastEvent.Phase; ph != "" && ph != progress.PhaseDone {
		during = progress.Title(e.lastEvent)
	}
	return &InterruptedError{During: during, Err: err}
}

// unapproved reports an outcome that ends a run before anything was
// rented, because nobody said yes. Such a run writes no receipt and does
// not become the state dir's latest run.
func unapproved(e *Scope, outcome receipt.Outcome) bool {
	return (outcome == OutcomeCancelled || outcome == OutcomeNotApproved) && !e.rentAttempted()
}

// forgetAsLatest points <state>/current back at the newest other run that
// was not itself left unapproved (or removes it when there is none), so
// that status, down and report keep meaning the run they meant before.
func forgetAsLatest(e *Scope) {
	cur := filepath.Join(e.StateRoot, "current")
	if b, err := os.ReadFile(cur); err != nil || strings.TrimSpace(string(b)) != e.state.RunID {
		return // someone else's run became latest meanwhile
	}
	entries, _ := os.ReadDir(filepath.Join(e.StateRoot, "runs"))
	var ids []string
	for _, ent := range entries {
		if ent.IsDir() && ent.Name() != e.state.RunID {
			ids = append(ids, ent.Name())
		}
	}
	// Run ids sort by time (label.NewRunID).
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	for _, id := range ids {
		st, err := runstate.LoadState(filepath.Join(e.StateRoot, "runs", id))
		if err != nil || st.Outcome == OutcomeCancelled || st.Outcome == OutcomeNotApproved && len(st.Attempts) == 0 {
			continue
		}
		_ = e.writeFileAtomic(cur, []byte(id+"\n"), 0o600)
		return
	}
	_ = os.Remove(cur)
}
