package cli

import (
	"errors"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
)

// CancelledError means the person answered no at a prompt: nothing was
// rented or destroyed. It is a choice, so it carries no hint and exits
// ExitCancelled rather than as a failure.
type CancelledError struct{ Msg string }

func (e *CancelledError) Error() string { return e.Msg }

// asCancelled turns the engine's declined approval into the one line a
// person sees ("cancelled — nothing rented"), dropping the step prefix.
func asCancelled(err error) error {
	if errors.Is(err, lifecycle.ErrDeclined) {
		return &CancelledError{Msg: lifecycle.ErrDeclined.Error()}
	}
	return err
}

// declined reports a receipt of a run that ended at the prompt before
// anything was rented: there is no receipt to show a person.
func declined(r *receipt.Receipt) bool {
	return r != nil && len(r.Attempts) == 0 && (r.Outcome == lifecycle.OutcomeCancelled || r.Outcome == lifecycle.OutcomeNotApproved)
}
