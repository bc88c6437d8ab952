package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// A rental's contract, watched while work runs on it (vast-api.md §12.2,
// §12.4). A contract ends at its host's end date (the instance's
// end_date), and a host may raise its price: the increase is pending, and
// unless the renter accepts it the contract is not extended at the old
// price but ends at the increase's contract_end_date. The watch answers
// each increase on the run's contract once, journaled: accepted when the
// new price stays within the ceiling the plan promised (gpu.max_dph, else
// the price approved) and the budget still covers the work's worst case,
// rejected otherwise (training's budget, open-ended, is checked on every
// monitoring pass instead). Work that would outlive the contract is stopped
// before the contract ends: ci and canary with the outcome contract_ended,
// training by a replacement from its last committed checkpoint.
//
// The watch reads the pending list at most every contractPoll of the
// run's clock and never on its own account past the work's deadline: it
// neither extends a run nor moves a self-advancing test clock further
// than the work itself may take.

// OutcomeContractEnded: the contract ended before the work was done.
const OutcomeContractEnded = receipt.ContractEnded

// contractPoll is the least time between two reads of the pending
// increases (an account-wide list, rate-limited per endpoint).
const contractPoll = 10 * time.Second

// ContractEndedError is work stopped because its rental's contract ends
// before the work would be done.
type ContractEndedError struct {
	Instance provider.InstanceID
	End      time.Time
	Why      string
}

func (e *ContractEndedError) Error() string {
	return fmt.Sprintf("the contract of instance %d ends %s (%s), before the work is done: stopped before it ended",
		e.Instance, e.End.UTC().Format(time.RFC3339), e.Why)
}

// OutcomeClass makes it a contract_ended run (Outcome).
func (e *ContractEndedError) OutcomeClass() receipt.Outcome { return OutcomeContractEnded }

// ContractWatch follows one rental's contract. Until is when the work on
// it ends at the latest (zero: open-ended); the contract matters only if
// it ends before then.
type ContractWatch struct {
	s      *Scope
	id     provider.InstanceID
	prices provider.PriceIncreases // nil: the market lists no increases
	Until  time.Time

	next     time.Time // the earliest next read of the pending list
	hostEnd  time.Time // the instance's end_date, as last shown
	rowEnds  map[int64]time.Time
	answered map[int64]bool
}

// WatchContract starts watching inst's contract (its end date as inst
// shows it).
func (e *Scope) WatchContract(inst provider.Instance, until time.Time) *ContractWatch {
	w := &ContractWatch{s: e, id: inst.ID, Until: until, hostEnd: inst.EndDate, rowEnds: map[int64]time.Time{}, answered: map[int64]bool{}}
	w.prices, _ = e.Market.(provider.PriceIncreases)
	return w
}

// Observe takes a fresh view of the instance: its end date.
func (w *ContractWatch) Observe(inst provider.Instance) {
	if inst.ID == w.id {
		w.hostEnd = inst.EndDate
	}
}

// End is when the contract ends as far as the run knows, and why (zero:
// no end known).
func (w *ContractWatch) End() (time.Time, string) {
	end, why := time.Time{}, ""
	for id, t := range w.rowEnds {
		if end.IsZero() || t.Before(end) {
			end, why = t, fmt.Sprintf("price increase %d not accepted", id)
		}
	}
	// The instance's end_date is the contract's: an increase not accepted
	// moves it too, so on a tie the increase is the reason.
	if h := w.hostEnd; !h.IsZero() && (end.IsZero() || h.Before(end)) {
		end, why = h, "the host's end date"
	}
	return end, why
}

// StopAt is when work must stop so that stopping (a last checkpoint,
// destroy and confirm) is over before the contract ends, one poll of
// the caller's included; zero when the contract outlives the work.
func (w *ContractWatch) StopAt(poll time.Duration) time.Time {
	end, _ := w.End()
	if end.IsZero() || (!w.Until.IsZero() && !end.Before(w.Until)) {
		return time.Time{}
	}
	return end.Add(-min(w.s.TeardownLimit(), time.Minute) - poll)
}

// Ending reports the contract's end as an error once work must stop
// (StopAt has come), else nil.
func (w *ContractWatch) Ending(poll time.Duration) *ContractEndedError {
	at := w.StopAt(poll)
	if at.IsZero() || w.s.Now().Before(at) {
		return nil
	}
	end, why := w.End()
	return &ContractEndedError{Instance: w.id, End: end, Why: why}
}

// Check reads the pending increases, unless it did within contractPoll,
// and answers each one on this contract once. A read that fails is tried
// again at the next check; a journal write that fails is returned.
func (w *ContractWatch) Check(ctx context.Context) error {
	now := w.s.Now()
	if w.prices == nil || now.Before(w.next) {
		return nil
	}
	w.next = now.Add(contractPoll)
	list, err := w.prices.PendingPriceIncreases(ctx)
	if err != nil {
		w.s.Log.Debug("pending price increases not read", "instance", w.id, "err", err)
		return nil
	}
	for _, p := range list {
		if p.ContractID != w.id || w.answered[p.ID] {
			continue
		}
		w.answered[p.ID] = true
		if err := w.answer(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// answer accepts p within the ceiling and the budget and rejects it
// otherwise, journaling the intent first and the outcome after.
func (w *ContractWatch) answer(ctx context.Context, p provider.PriceIncrease) error {
	e := w.s
	a := e.state.AttemptFor(w.id)
	if a == nil {
		return nil
	}
	oldDPH := a.DPHTotal
	newDPH := round6(oldDPH + 3600*(p.NewGPUCostPerSec-p.OldGPUCostPerSec+p.NewDiskCostPerSec-p.OldDiskCostPerSec))
	ceiling := raceCeiling(e, oldDPH)
	if pol := e.Frozen().Policy; pol.Interruptible && pol.MaxBid > 0 {
		ceiling = pol.MaxBid
	}
	d := runstate.PriceIncreaseData{Instance: w.id, ID: p.ID, OldDPH: oldDPH, NewDPH: newDPH, CeilingDPH: ceiling,
		Decision: receipt.PriceAccepted, ContractEnd: p.ContractEnd}
	switch {
	case newDPH > ceiling+1e-9:
		d.Decision, d.Reason = receipt.PriceRejected, fmt.Sprintf("$%.4f/h is over the ceiling $%.4f/h", newDPH, ceiling)
	case !w.Until.IsZero() && e.workflow().jobBound(e.manifest) > 0:
		// Work approved for its whole bound (ci, canary) must still fit the
		// budget at the new price; training's budget is checked every pass.
		left := w.Until.Sub(e.Now()) + min(e.TeardownLimit(), time.Minute)
		if worst := e.SpentSoFar() + newDPH*left.Hours(); worst > e.Frozen().MaxSpendUSD {
			d.Decision, d.Reason = receipt.PriceRejected, fmt.Sprintf("at $%.4f/h the work's worst case $%.4f passes budget.max_spend $%.2f", newDPH, worst, e.Frozen().MaxSpendUSD)
		}
	}
	if err := e.Record("intent", runstate.StepPriceIncrease, d); err != nil {
		return err // not journaled: not answered; the contract ends at its date
	}
	var err error
	if d.Decision == receipt.PriceAccepted {
		err = w.prices.AcceptPriceIncrease(ctx, p.ID)
	} else {
		err = w.prices.RejectPriceIncrease(ctx, p.ID)
	}
	if err != nil {
		d.Decision, d.Reason = receipt.PriceUnanswered, fmt.Sprintf("%s (%v)", d.Reason, err)
	}
	if d.Decision != receipt.PriceAccepted {
		w.rowEnds[p.ID] = p.ContractEnd
	}
	e.Infof("instance %d: %s%s", w.id, receipt.PriceIncrease{ID: p.ID, OldDPH: oldDPH, NewDPH: newDPH, CeilingDPH: ceiling, Decision: d.Decision}.Words(),
		map[bool]string{true: "", false: fmt.Sprintf("; the contract ends %s", p.ContractEnd.UTC().Format(time.RFC3339))}[d.Decision == receipt.PriceAccepted])
	return e.Record("done", runstate.StepPriceIncrease, d)
}

// watchBeside runs the watch beside work that ends by until, cancelling
// stop with a *ContractEndedError when the contract ends first. It sleeps
// on the run's clock only until its next read or the moment to stop, and
// returns at until or when ctx ends (the work is over): it never extends
// the work, nor waits past the work's own deadline.
func (w *ContractWatch) watchBeside(ctx context.Context, stop context.CancelCauseFunc) {
	for {
		if err := w.Check(ctx); err != nil {
			stop(err) // a journal that cannot be written ends the work
			return
		}
		if ended := w.Ending(0); ended != nil {
			stop(ended)
			return
		}
		// The next moment worth waking for: the moment to stop, or the
		// next read; none before the work's deadline ends the watch.
		wake := w.StopAt(0)
		if w.prices != nil && (wake.IsZero() || w.next.Before(wake)) {
			wake = w.next
		}
		if wake.IsZero() || !wake.Before(w.Until) {
			return
		}
		if err := w.s.Sleep(ctx, max(0, wake.Sub(w.s.Now()))); err != nil {
			return // the work is over
		}
	}
}

// errContractEnded reports whether err is (or wraps) a contract's end.
func errContractEnded(err error) (*ContractEndedError, bool) {
	var ce *ContractEndedError
	ok := errors.As(err, &ce)
	return ce, ok
}
