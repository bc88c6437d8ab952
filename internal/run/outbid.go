package run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
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

type bidData struct {
	Instance provider.InstanceID `json:"instance_id"`
	BidDPH   float64             `json:"bid_dph"`
	Reason   string              `json:"reason"`
}

type interruptedData struct {
	Instance       provider.InstanceID `json:"instance_id"`
	Reason         string              `json:"reason"`
	LastCheckpoint *CheckpointRef      `json:"last_checkpoint"`
	MinBid         float64             `json:"min_bid,omitempty"`
	Policy         string              `json:"on_outbid,omitempty"`
}

type resumedData struct {
	Instance          provider.InstanceID `json:"instance_id"`
	StoppedSeconds    float64             `json:"stopped_seconds"`
	StoppedStorageUSD float64             `json:"stopped_storage_usd"`
}

// replayBid applies the bid steps to the state. Called by Replay for
// every record.
func replayBid(s *State, r journal.Record) {
	switch r.Step {
	case stepBid:
		var d bidData
		r.Decode(&d)
		if a := s.attemptFor(d.Instance); a != nil && a.Bid != nil {
			if d.Reason == "rebid" {
				a.Bid.Rebids = append(a.Bid.Rebids, d.BidDPH)
			}
			a.Bid.BidDPH = d.BidDPH
			a.Bid.history = append(a.Bid.history, bidAt{at: r.Time, bid: d.BidDPH})
			a.DPHTotal = d.BidDPH + a.StorageDPH
		}
	case stepInterrupted:
		var d interruptedData
		r.Decode(&d)
		if a := s.attemptFor(d.Instance); a != nil && a.Bid != nil && d.Reason == "outbid" {
			a.Bid.Outbids++
			a.Bid.stoppedSince = r.Time
		}
	case stepResumed:
		var d resumedData
		r.Decode(&d)
		if a := s.attemptFor(d.Instance); a != nil && a.Bid != nil {
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
func (e *Engine) assertBid(ctx context.Context, id provider.InstanceID) error {
	a := e.state.attemptFor(id)
	if a == nil || a.Bid == nil {
		return nil
	}
	var inst provider.Instance
	err := poll.Until(ctx, e.Clock, poll.Policy{Initial: time.Second, Max: 5 * time.Second, Jitter: e.jitter(), Deadline: e.now().Add(reconcileGrace)},
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
		return e.record("event", stepBid, bidData{Instance: id, BidDPH: inst.BidDPH, Reason: "rent"})
	}
	what := fmt.Sprintf("instance %d is on demand at $%.4f/h (is_bid false), not a bid at $%.4f/h", id, inst.DPHTotal, a.Bid.BidDPH)
	if inst.IsBid {
		what = fmt.Sprintf("instance %d bids $%.4f/h, not the $%.4f/h asked", id, inst.BidDPH, a.Bid.BidDPH)
	}
	e.infof("%s: destroying it", what)
	if jerr := e.record("event", stepFailover, instanceData{Instance: id, Reason: "silent on-demand rental: " + what}); jerr != nil {
		return errors.Join(jerr, &StepError{Step: stepRent, Instance: id, Err: fmt.Errorf("%w: %s", ErrSilentOnDemand, what)})
	}
	cerr := e.destroyConfirm(context.WithoutCancel(ctx), id, time.Time{})
	return &StepError{Step: stepRent, Instance: id, Err: errors.Join(fmt.Errorf("%w: %s", ErrSilentOnDemand, what), cerr)}
}

// isOutbid reports an interruptible rental stopped while the run wants it
// running: Vast's outbid signature (intended, cur and next state stopped).
func (e *Engine) isOutbid(inst provider.Instance) bool {
	a := e.state.attemptFor(inst.ID)
	return a != nil && a.Bid != nil && inst.Paused()
}

// bidChanger is the change-bid route, which the real client has.
type bidChanger interface {
	ChangeBid(ctx context.Context, id provider.InstanceID, price float64) error
}

// onOutbid journals the interruption and applies train.on_outbid. It
// returns true when the same instance runs again (re-bid or waited), false
// when it must be replaced (the caller destroys it, confirmed, and rents
// elsewhere). The budget and the runtime deadline hold throughout,
// counting the storage billed while stopped.
func (e *Engine) onOutbid(ctx context.Context, inst provider.Instance, deadline time.Time) (bool, error) {
	pol := e.trainSpec().OnOutbid
	if cur, err := e.Market.ShowInstance(ctx, inst.ID); err == nil {
		inst = cur // the market now, not at rent
	}
	if inst.Running() {
		// Outbid and resumed between two polls (the workload died with the
		// stop): whatever the policy, the same rental goes on.
		if err := e.record("event", stepInterrupted, interruptedData{Instance: inst.ID, Reason: "outbid", LastCheckpoint: e.train.LastCheckpoint, MinBid: inst.MinBid, Policy: pol}); err != nil {
			return false, err
		}
		e.infof("instance %d was stopped and ran again between two polls (its workload is gone): restarting it there from the last committed checkpoint", inst.ID)
		return true, e.record("event", stepResumed, resumedData{Instance: inst.ID})
	}
	e.fillTrainReport(ctx) // the last committed checkpoint, as the store says
	if err := e.record("event", stepInterrupted, interruptedData{Instance: inst.ID, Reason: "outbid", LastCheckpoint: e.train.LastCheckpoint, MinBid: inst.MinBid, Policy: pol}); err != nil {
		return false, err
	}
	last := "none"
	if cp := e.train.LastCheckpoint; cp != nil {
		last = fmt.Sprint(cp.Step)
	}
	e.infof("instance %d was outbid (min_bid now $%.4f/h; last committed checkpoint %s): on_outbid %s", inst.ID, inst.MinBid, last, pol)
	wait := e.trainSpec().OutbidWait.Duration()
	switch pol {
	case config.OnOutbidRebid:
		ok, err := e.rebid(ctx, inst)
		if err != nil || !ok {
			return false, err
		}
	case config.OnOutbidWait:
	default:
		return false, nil
	}
	resumed, err := e.waitResume(ctx, inst.ID, e.now().Add(wait), deadline)
	if err != nil || !resumed {
		if err == nil {
			e.infof("instance %d did not run again within %s: replacing it", inst.ID, wait)
		}
		return false, err
	}
	return true, nil
}

// rebid raises the bid to the current min_bid plus the margin, within the
// ceiling. false: the ceiling does not allow a winning bid (replace).
func (e *Engine) rebid(ctx context.Context, inst provider.Instance) (bool, error) {
	a := e.state.attemptFor(inst.ID)
	bc, ok := e.Market.(bidChanger)
	if !ok || a == nil || a.Bid == nil {
		return false, nil
	}
	p := e.frozen().Policy
	target := provider.RoundBid(inst.MinBid * (1 + p.BidMargin))
	room := p.MaxBid - a.StorageDPH
	if p.MaxBid > 0 && target > room {
		target = provider.RoundBid(room - 0.0005)
	}
	if target < inst.MinBid || target <= a.Bid.BidDPH {
		e.infof("min_bid $%.4f/h + storage $%.4f/h leaves no winning bid over $%.4f/h within gpu.max_bid $%.4f/h: replacing instance %d", inst.MinBid, a.StorageDPH, a.Bid.BidDPH, p.MaxBid, inst.ID)
		return false, nil
	}
	if err := e.record("event", stepBid, bidData{Instance: inst.ID, BidDPH: target, Reason: "rebid"}); err != nil {
		return false, err
	}
	if err := bc.ChangeBid(ctx, inst.ID, target); err != nil {
		return false, &StepError{Step: stepBid, Instance: inst.ID, Err: fmt.Errorf("raise the bid of instance %d to $%.4f/h: %w", inst.ID, target, err)}
	}
	e.infof("raised the bid of instance %d to $%.4f/h (ceiling $%.4f/h)", inst.ID, target, p.MaxBid)
	return true, nil
}

// waitResume polls until the instance runs again, the wait ends (false),
// or the budget or the runtime deadline stops the run.
func (e *Engine) waitResume(ctx context.Context, id provider.InstanceID, until, deadline time.Time) (bool, error) {
	a := e.state.attemptFor(id)
	since := e.now()
	interval := max(e.trainSpec().Poll.Duration(), minTrainPoll)
	for {
		inst, err := e.Market.ShowInstance(ctx, id)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			return false, nil
		case err == nil && inst.Running():
			stopped := e.now().Sub(since).Seconds()
			storage := 0.0
			if a != nil {
				storage = a.StorageDPH * stopped / 3600
			}
			e.infof("instance %d runs again after %.0fs stopped ($%.4f of storage)", id, stopped, storage)
			return true, e.record("event", stepResumed, resumedData{Instance: id, StoppedSeconds: stopped, StoppedStorageUSD: storage})
		case err == nil && !inst.Paused() && inst.ActualStatus != "loading" && inst.ActualStatus != "stopped" && inst.ActualStatus != "":
			return false, nil // exited, offline: not coming back
		}
		storageDPH := 0.0
		if a != nil {
			storageDPH = a.StorageDPH
		}
		if projected := e.spentSoFar() + storageDPH*(2*interval).Hours(); projected > e.frozen().MaxSpendUSD {
			return false, &StepError{Step: "train", Outcome: OutcomeBudget, Err: fmt.Errorf("projected spend $%.4f (storage billed while outbid included) would pass budget.max_spend $%.2f", projected, e.frozen().MaxSpendUSD)}
		}
		if !e.now().Before(deadline) {
			return false, &StepError{Step: "train", Outcome: OutcomeTimeout, Err: fmt.Errorf("the runtime deadline %s passed while instance %d was outbid", e.trainSpec().RuntimeDeadline, id)}
		}
		if !e.now().Before(until) {
			return false, e.record("event", stepResumed, resumedData{Instance: id, StoppedSeconds: e.now().Sub(since).Seconds(), StoppedStorageUSD: storageDPH * e.now().Sub(since).Hours()})
		}
		if err := e.sleep(ctx, e.jittered(interval)); err != nil {
			return false, err
		}
	}
}

// retireLost clears the record of the workload an outbid stop killed on a
// resumed instance, so that it starts again from the last committed
// checkpoint; the agent does so only when no supervisor holds the
// instance and the workload's process is gone.
func (e *Engine) retireLost(ctx context.Context, c *remote.Client, id provider.InstanceID) error {
	var r agent.RetireResult
	// The stop's kill may still be landing: a process that is alive a
	// moment longer is asked about again, for a few seconds.
	for try := 0; ; try++ {
		b, err := e.agentJSON(ctx, c, nil, "retire-lost --json")
		if err != nil {
			return fmt.Errorf("clear the stopped workload on instance %d: %w", id, err)
		}
		if r, err = agent.DecodeRetire(b); err != nil {
			return &StepError{Step: "train", Instance: id, Err: fmt.Errorf("%w: instance %d: %w", ErrAgentProtocol, id, err)}
		}
		if r.Retired || r.Kept != agent.KeptAlive || try >= 10 {
			break
		}
		if err := e.sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	if r.Retired {
		e.infof("the workload the outbid stopped on instance %d is set aside; it starts again from the last committed checkpoint", id)
	} else {
		e.Log.Debug("nothing to retire after the resume", "instance", id, "kept", r.Kept)
	}
	return nil
}

// lostToOutbid reports a workload gone on an interruptible instance the
// API shows running: the signature of a stop and resume that fell between
// two polls (a stop kills every process of the instance).
func (e *Engine) lostToOutbid(cur provider.Instance, apiErr error) bool {
	a := e.state.attemptFor(cur.ID)
	return apiErr == nil && a != nil && a.Bid != nil && cur.Running()
}

// outbidNow asks the API, before SSH, whether an interruptible rental is
// stopped by the market, so an outbid is seen within one poll however long
// SSH takes to fail. No call is made for an on-demand rental.
func (e *Engine) outbidNow(ctx context.Context, id provider.InstanceID) bool {
	if a := e.state.attemptFor(id); a == nil || a.Bid == nil {
		return false
	}
	cur, err := e.Market.ShowInstance(ctx, id)
	return err == nil && e.isOutbid(cur)
}

// provisionAttempts bounds the rentals one provisioning makes: an
// interruptible rental can be outbid while it boots, so it may try as many
// machines as train.max_attempts allows.
func (e *Engine) provisionAttempts() int {
	if e.frozen().Policy.Interruptible {
		return max(maxAttempts, e.trainSpec().MaxAttempts)
	}
	return maxAttempts
}
