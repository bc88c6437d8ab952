package train

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/spec"
)

// isOutbid reports an interruptible rental stopped while the run wants it
// running: Vast's outbid signature (intended, cur and next state stopped).
func isOutbid(st *runstate.State, inst provider.Instance) bool {
	a := st.AttemptFor(inst.ID)
	return a != nil && a.Bid != nil && inst.Paused()
}

// onOutbid journals the interruption and applies train.on_outbid. It
// returns true when the same instance runs again (re-bid or waited), false
// when it must be replaced (the caller destroys it, confirmed, and rents
// elsewhere). The budget and the runtime deadline hold throughout,
// counting the storage billed while stopped.
func (e *flow) onOutbid(ctx context.Context, inst provider.Instance, deadline time.Time) (bool, error) {
	pol := e.trainSpec().OnOutbid
	if cur, err := e.s.Market.ShowInstance(ctx, inst.ID); err == nil {
		inst = cur // the market now, not at rent
	}
	if inst.Running() {
		// Outbid and resumed between two polls (the workload died with the
		// stop): whatever the policy, the same rental goes on.
		if err := e.s.Record("event", lifecycle.StepInterrupted, runstate.InterruptedData{Instance: inst.ID, Reason: "outbid", LastCheckpoint: e.report.LastCheckpoint, MinBid: inst.MinBid, Policy: pol}); err != nil {
			return false, err
		}
		e.s.Infof("instance %d was stopped and ran again between two polls (its workload is gone): restarting it there from the last committed checkpoint", inst.ID)
		return true, e.s.Record("event", lifecycle.StepResumed, runstate.ResumedData{Instance: inst.ID})
	}
	e.fillTrainReport(ctx) // the last committed checkpoint, as the store says
	if err := e.s.Record("event", lifecycle.StepInterrupted, runstate.InterruptedData{Instance: inst.ID, Reason: "outbid", LastCheckpoint: e.report.LastCheckpoint, MinBid: inst.MinBid, Policy: pol}); err != nil {
		return false, err
	}
	last := "none"
	if cp := e.report.LastCheckpoint; cp != nil {
		last = fmt.Sprint(cp.Step)
	}
	e.s.Infof("instance %d was outbid (min_bid now $%.4f/h; last committed checkpoint %s): on_outbid %s", inst.ID, inst.MinBid, last, pol)
	wait := e.trainSpec().OutbidWait.Duration()
	switch pol {
	case spec.OnOutbidRebid:
		ok, err := e.rebid(ctx, inst)
		if err != nil || !ok {
			return false, err
		}
	case spec.OnOutbidWait:
	default:
		return false, nil
	}
	resumed, err := e.waitResume(ctx, inst.ID, e.s.Now().Add(wait), deadline)
	if err != nil || !resumed {
		if err == nil {
			e.s.Infof("instance %d did not run again within %s: replacing it", inst.ID, wait)
		}
		return false, err
	}
	return true, nil
}

// rebid raises the bid to the current min_bid plus the margin, within the
// ceiling. false: the ceiling does not allow a winning bid (replace).
func (e *flow) rebid(ctx context.Context, inst provider.Instance) (bool, error) {
	a := e.s.State().AttemptFor(inst.ID)
	bc, ok := e.s.Market.(provider.BidChanger)
	if !ok || a == nil || a.Bid == nil {
		return false, nil
	}
	p := e.s.Frozen().Policy
	target := provider.RoundBid(inst.MinBid * (1 + p.BidMargin))
	room := p.MaxBid - a.StorageDPH
	if p.MaxBid > 0 && target > room {
		target = provider.RoundBid(room - 0.0005)
	}
	if target < inst.MinBid || target <= a.Bid.BidDPH {
		e.s.Infof("min_bid $%.4f/h + storage $%.4f/h leaves no winning bid over $%.4f/h within gpu.max_bid $%.4f/h: replacing instance %d", inst.MinBid, a.StorageDPH, a.Bid.BidDPH, p.MaxBid, inst.ID)
		return false, nil
	}
	if err := e.s.Record("event", lifecycle.StepBid, runstate.BidData{Instance: inst.ID, BidDPH: target, Reason: "rebid"}); err != nil {
		return false, err
	}
	if err := bc.ChangeBid(ctx, inst.ID, target); err != nil {
		return false, &lifecycle.StepError{Step: lifecycle.StepBid, Instance: inst.ID, Err: fmt.Errorf("raise the bid of instance %d to $%.4f/h: %w", inst.ID, target, err)}
	}
	e.s.Infof("raised the bid of instance %d to $%.4f/h (ceiling $%.4f/h)", inst.ID, target, p.MaxBid)
	return true, nil
}

// waitResume polls until the instance runs again, the wait ends (false),
// or the budget or the runtime deadline stops the run.
func (e *flow) waitResume(ctx context.Context, id provider.InstanceID, until, deadline time.Time) (bool, error) {
	a := e.s.State().AttemptFor(id)
	since := e.s.Now()
	interval := max(e.trainSpec().Poll.Duration(), minTrainPoll)
	for {
		inst, err := e.s.Market.ShowInstance(ctx, id)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			return false, nil
		case err == nil && inst.Running():
			stopped := e.s.Now().Sub(since).Seconds()
			storage := 0.0
			if a != nil {
				storage = a.StorageDPH * stopped / 3600
			}
			e.s.Infof("instance %d runs again after %.0fs stopped ($%.4f of storage)", id, stopped, storage)
			return true, e.s.Record("event", lifecycle.StepResumed, runstate.ResumedData{Instance: id, StoppedSeconds: stopped, StoppedStorageUSD: storage})
		case err == nil && !inst.Paused() && inst.ActualStatus != "loading" && inst.ActualStatus != "stopped" && inst.ActualStatus != "":
			return false, nil // exited, offline: not coming back
		}
		storageDPH := 0.0
		if a != nil {
			storageDPH = a.StorageDPH
		}
		if projected := e.s.SpentSoFar() + storageDPH*(2*interval).Hours(); projected > e.s.Frozen().MaxSpendUSD {
			return false, &lifecycle.StepError{Step: "train", Outcome: lifecycle.OutcomeBudget, Err: fmt.Errorf("projected spend $%.4f (storage billed while outbid included) would pass budget.max_spend $%.2f", projected, e.s.Frozen().MaxSpendUSD)}
		}
		if !e.s.Now().Before(deadline) {
			return false, &lifecycle.StepError{Step: "train", Outcome: lifecycle.OutcomeTimeout, Err: fmt.Errorf("the runtime deadline %s passed while instance %d was outbid", e.trainSpec().RuntimeDeadline, id)}
		}
		if !e.s.Now().Before(until) {
			return false, e.s.Record("event", lifecycle.StepResumed, runstate.ResumedData{Instance: id, StoppedSeconds: e.s.Now().Sub(since).Seconds(), StoppedStorageUSD: storageDPH * e.s.Now().Sub(since).Hours()})
		}
		if err := e.s.Sleep(ctx, e.s.Jittered(interval)); err != nil {
			return false, err
		}
	}
}

// retireLost clears the record of the workload an outbid stop killed on a
// resumed instance, so that it starts again from the last committed
// checkpoint; the agent does so only when no supervisor holds the
// instance and the workload's process is gone.
func (e *flow) retireLost(ctx context.Context, c *remote.Client, id provider.InstanceID) error {
	var r agent.RetireResult
	// The stop's kill may still be landing: a process that is alive a
	// moment longer is asked about again, for a few seconds.
	for try := 0; ; try++ {
		var err error
		r, err = e.agentOn(c, id).RetireLost(ctx)
		if err = agentErr(err); errors.Is(err, ErrAgentProtocol) {
			return &lifecycle.StepError{Step: "train", Instance: id, Err: err}
		}
		if err != nil {
			return fmt.Errorf("clear the stopped workload: %w", err)
		}
		if r.Retired || r.Kept != agent.KeptAlive || try >= 10 {
			break
		}
		if err := e.s.Sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	if r.Retired {
		e.s.Infof("the workload the outbid stopped on instance %d is set aside; it starts again from the last committed checkpoint", id)
	} else {
		e.s.Log.Debug("nothing to retire after the resume", "instance", id, "kept", r.Kept)
	}
	return nil
}

// lostToOutbid reports a workload gone on an interruptible instance the
// API shows running: the signature of a stop and resume that fell between
// two polls (a stop kills every process of the instance).
func lostToOutbid(st *runstate.State, cur provider.Instance, apiErr error) bool {
	a := st.AttemptFor(cur.ID)
	return apiErr == nil && a != nil && a.Bid != nil && cur.Running()
}

// outbidNow asks the API, before SSH, whether an interruptible rental is
// stopped by the market, so an outbid is seen within one poll however long
// SSH takes to fail. No call is made for an on-demand rental.
func (e *flow) outbidNow(ctx context.Context, id provider.InstanceID) bool {
	if a := e.s.State().AttemptFor(id); a == nil || a.Bid == nil {
		return false
	}
	cur, err := e.s.Market.ShowInstance(ctx, id)
	return err == nil && isOutbid(e.s.State(), cur)
}
