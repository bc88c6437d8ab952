package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// Rental types in the receipt.
const (
	RentalInterruptible = "interruptible"
	RentalOnDemand      = "on_demand"
)

// newAttemptBid is the rent intent's bid, or nil on demand.
func newAttemptBid(p policy.Policy, o provider.Offer) *receipt.AttemptBid {
	if !p.Interruptible {
		return nil
	}
	return &receipt.AttemptBid{RentalType: RentalInterruptible, BidDPH: p.Bid(o), MinBidAtRent: o.MinBid,
		OnDemandDPH: policy.TotalDPH(o, p.DiskGB), MaxBid: p.MaxBid}
}

// ErrSilentOnDemand means a create meant as a bid rented on demand (or at
// another price): Vast does not say which kind a create rented, so the
// instance is read back, and such a rental is destroyed.
var ErrSilentOnDemand = errors.New("the rental is not the interruptible bid that was asked for")

// assertBid reads a new interruptible rental back before anything else and
// destroys it (confirmed) unless it is a bid at the price asked.
func assertBid(ctx context.Context, e *Scope, id provider.InstanceID) error {
	a := e.state.AttemptFor(id)
	if a == nil || a.Bid == nil {
		return nil
	}
	var inst provider.Instance
	err := poll.Until(ctx, e.Clock, poll.Policy{Initial: time.Second, Max: 5 * time.Second, Jitter: e.jitter(), Deadline: e.Now().Add(reconcileGrace)},
		func(ctx context.Context) (bool, error) {
			var err error
			inst, err = e.Market.ShowInstance(ctx, id)
			if errors.Is(err, provider.ErrNotFound) {
				return false, nil // read-after-create lag
			}
			return err == nil, err
		})
	if err != nil {
		return &StepError{Step: stepRent, Instance: id, Err: fmt.Errorf("read back interruptible instance %d: %w", id, err)}
	}
	if inst.IsBid && math.Abs(inst.BidDPH-a.Bid.BidDPH) <= 0.0015 {
		return e.Record("event", stepBid, runstate.BidData{Instance: id, BidDPH: inst.BidDPH, Reason: "rent"})
	}
	what := fmt.Sprintf("instance %d is on demand at $%.4f/h (is_bid false), not a bid at $%.4f/h", id, inst.DPHTotal, a.Bid.BidDPH)
	if inst.IsBid {
		what = fmt.Sprintf("instance %d bids $%.4f/h, not the $%.4f/h asked", id, inst.BidDPH, a.Bid.BidDPH)
	}
	e.Infof("%s: destroying it", what)
	if jerr := e.Record("event", stepFailover, runstate.InstanceData{Instance: id, Reason: "silent on-demand rental: " + what}); jerr != nil {
		return errors.Join(jerr, &StepError{Step: stepRent, Instance: id, Err: fmt.Errorf("%w: %s", ErrSilentOnDemand, what)})
	}
	cerr := destroyConfirm(context.WithoutCancel(ctx), e, id, time.Time{})
	return &StepError{Step: stepRent, Instance: id, Err: errors.Join(fmt.Errorf("%w: %s", ErrSilentOnDemand, what), cerr)}
}

// provisionAttempts bounds the rentals one provisioning makes: an
// interruptible rental can be outbid while it boots, so it may try as many
// machines as train.max_attempts allows.
func provisionAttempts(e *Scope) int {
	if e.Frozen().Policy.Interruptible {
		_, n := e.workflow().interruptions(e.manifest)
		return max(maxAttempts, n)
	}
	return maxAttempts
}
