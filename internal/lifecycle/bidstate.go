package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Journal steps of interruptible rentals.
const (
	stepBid         = "bid"         // event: a bid placed at rent or raised {instance_id, bid_dph, reason}
	stepInterrupted = "interrupted" // event: {instance_id, reason: outbid, last_checkpoint, min_bid}
	stepResumed     = "resumed"     // event: {instance_id, stopped_seconds, stopped_storage_usd}
)

// Rental types in the receipt.
const (
	RentalInterruptible = "interruptible"
	RentalOnDemand      = "on_demand"
)

// AttemptBid is what one interruptible rental was: its bid, what the same
// offer costs on demand, the re-bids, and the time it spent stopped while
// outbid with the storage billed for it.
type AttemptBid struct {
	RentalType   string    `json:"rental_type"`
	BidDPH       float64   `json:"bid_dph"` // the bid now (GPU part, per machine)
	MinBidAtRent float64   `json:"min_bid_at_rent"`
	OnDemandDPH  float64   `json:"on_demand_dph"` // the same offer on demand, GPU + storage
	MaxBid       float64   `json:"max_bid"`
	Rebids       []float64 `json:"rebids,omitempty"`
	Outbids      int       `json:"outbids"`
	// StoppedSeconds is the time spent stopped while outbid, and
	// StoppedStorageUSD the storage billed for it.
	StoppedSeconds    float64 `json:"stopped_seconds"`
	StoppedStorageUSD float64 `json:"stopped_storage_usd"`
	// stoppedSince is the open interruption, when one is.
	stoppedSince time.Time
	// history is each bid in force and when it started (rent, re-bids).
	history []bidAt
}

type bidAt struct {
	at  time.Time
	bid float64
}

// meanBid is the bid averaged over the time each was in force up to end:
// the rate a charge of several bids was billed at. Time ratios are the
// same on the controller's clock as on the marketplace's.
func (b *AttemptBid) meanBid(end time.Time) float64 {
	var sum, secs float64
	for i, h := range b.history {
		to := end
		if i+1 < len(b.history) {
			to = b.history[i+1].at
		}
		d := to.Sub(h.at).Seconds()
		if d > 0 {
			sum, secs = sum+h.bid*d, secs+d
		}
	}
	if secs == 0 {
		return b.BidDPH
	}
	return sum / secs
}

// newAttemptBid is the rent intent's bid, or nil on demand.
func newAttemptBid(p policy.Policy, o provider.Offer) *AttemptBid {
	if !p.Interruptible {
		return nil
	}
	return &AttemptBid{RentalType: RentalInterruptible, BidDPH: p.Bid(o), MinBidAtRent: o.MinBid,
		OnDemandDPH: policy.TotalDPH(o, p.DiskGB), MaxBid: p.MaxBid}
}

type BidData struct {
	Instance provider.InstanceID `json:"instance_id"`
	BidDPH   float64             `json:"bid_dph"`
	Reason   string              `json:"reason"`
}

type InterruptedData struct {
	Instance       provider.InstanceID    `json:"instance_id"`
	Reason         string                 `json:"reason"`
	LastCheckpoint *receipt.CheckpointRef `json:"last_checkpoint"`
	MinBid         float64                `json:"min_bid,omitempty"`
	Policy         string                 `json:"on_outbid,omitempty"`
}

type ResumedData struct {
	Instance          provider.InstanceID `json:"instance_id"`
	StoppedSeconds    float64             `json:"stopped_seconds"`
	StoppedStorageUSD float64             `json:"stopped_storage_usd"`
}

// replayBid applies the bid steps to the state. Called by Replay for
// every record.
func replayBid(s *State, r journal.Record) {
	switch r.Step {
	case stepBid:
		var d BidData
		r.Decode(&d)
		if a := s.AttemptFor(d.Instance); a != nil && a.Bid != nil {
			if d.Reason == "rebid" {
				a.Bid.Rebids = append(a.Bid.Rebids, d.BidDPH)
			}
			a.Bid.BidDPH = d.BidDPH
			a.Bid.history = append(a.Bid.history, bidAt{at: r.Time, bid: d.BidDPH})
			a.DPHTotal = d.BidDPH + a.StorageDPH
		}
	case stepInterrupted:
		var d InterruptedData
		r.Decode(&d)
		if a := s.AttemptFor(d.Instance); a != nil && a.Bid != nil && d.Reason == "outbid" {
			a.Bid.Outbids++
			a.Bid.stoppedSince = r.Time
		}
	case stepResumed:
		var d ResumedData
		r.Decode(&d)
		if a := s.AttemptFor(d.Instance); a != nil && a.Bid != nil {
			a.Bid.StoppedSeconds += d.StoppedSeconds
			a.Bid.StoppedStorageUSD += d.StoppedStorageUSD
			a.Bid.stoppedSince = time.Time{}
		}
	}
}

// stoppedDiscount is what spentSoFar over-counts for a's time stopped
// while outbid: only storage bills then, not the GPU.
func (a *Attempt) stoppedDiscount(now time.Time) float64 {
	if a.Bid == nil {
		return 0
	}
	secs := a.Bid.StoppedSeconds
	if !a.Bid.stoppedSince.IsZero() { // stopped until now, or until destroyed
		end := now
		if !a.ConfirmedAt.IsZero() && a.ConfirmedAt.Before(end) {
			end = a.ConfirmedAt
		}
		secs += math.Max(0, end.Sub(a.Bid.stoppedSince).Seconds())
	}
	return (a.DPHTotal - a.StorageDPH) * secs / 3600
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
		return e.Record("event", stepBid, BidData{Instance: id, BidDPH: inst.BidDPH, Reason: "rent"})
	}
	what := fmt.Sprintf("instance %d is on demand at $%.4f/h (is_bid false), not a bid at $%.4f/h", id, inst.DPHTotal, a.Bid.BidDPH)
	if inst.IsBid {
		what = fmt.Sprintf("instance %d bids $%.4f/h, not the $%.4f/h asked", id, inst.BidDPH, a.Bid.BidDPH)
	}
	e.Infof("%s: destroying it", what)
	if jerr := e.Record("event", stepFailover, InstanceData{Instance: id, Reason: "silent on-demand rental: " + what}); jerr != nil {
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
