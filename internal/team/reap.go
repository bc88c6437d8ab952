package team

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Reap verdicts, most conservative first. Only VerdictOrphan is acted on.
const (
	VerdictNotOurs   = "not_ours"  // no vastrun label under the prefix: never touched
	VerdictYoung     = "young"     // inside the grace period: its run may not have written yet
	VerdictLive      = "live"      // its run's lease is live: someone drives it
	VerdictKept      = "kept"      // an `up` run keeps it on purpose, until its label expires
	VerdictUntracked = "untracked" // its run is not in the bucket (local state, or another bucket)
	VerdictUnknown   = "unknown"   // the bucket could not be read: fail closed
	VerdictOrphan    = "orphan"    // terminal or abandoned run: destroy, after taking its lease
)

// Judgement is the verdict on one instance.
type Judgement struct {
	Instance provider.InstanceID `json:"instance_id"`
	Label    string              `json:"label"`
	Run      string              `json:"run_id,omitempty"`
	Verdict  string              `json:"verdict"`
	Reason   string              `json:"reason"`
	Result   string              `json:"result,omitempty"`
	// Settled is what the run's line in the team ledger settled to when
	// this reap ended the run (SettleReaped).
	Settled *Settlement `json:"settled,omitempty"`
}

// Classify judges every instance of the account by its label and the
// bucket's state of its run. An error reading the bucket for a run makes
// that instance VerdictUnknown, never an orphan.
func Classify(ctx context.Context, b teamstate.Backend, list []provider.Instance, prefix string, grace time.Duration, now time.Time) []Judgement {
	var out []Judgement
	for _, in := range list {
		j := Judgement{Instance: in.ID, Label: in.Label}
		l, err := label.Parse(in.Label)
		switch {
		case err != nil || !strings.HasPrefix(in.Label, prefix):
			j.Verdict, j.Reason = VerdictNotOurs, "no vastrun label under "+prefix
			out = append(out, j)
			continue
		case !in.StartDate.IsZero() && now.Sub(in.StartDate) < grace:
			j.Run, j.Verdict, j.Reason = l.RunID, VerdictYoung, fmt.Sprintf("started %s ago, inside the %s grace period", now.Sub(in.StartDate).Round(time.Second), grace)
			out = append(out, j)
			continue
		}
		j.Run = l.RunID
		rec, live, _, lerr := teamstate.ReadLease(ctx, b, l.RunID)
		sum, serr := ReadSummary(ctx, b, l.RunID)
		switch {
		case lerr != nil && !errors.Is(lerr, teamstate.ErrNotExist), serr != nil && !errors.Is(serr, teamstate.ErrNotExist):
			j.Verdict, j.Reason = VerdictUnknown, fmt.Sprintf("the bucket could not be read: %v", errors.Join(lerr, serr))
		case errors.Is(lerr, teamstate.ErrNotExist) && errors.Is(serr, teamstate.ErrNotExist):
			j.Verdict, j.Reason = VerdictUntracked, "its run is not in this bucket (reap by label expiry: vastrun reap)"
		case live:
			j.Verdict, j.Reason = VerdictLive, fmt.Sprintf("run %s is driven by %s (lease generation %d)", l.RunID, rec.Holder, rec.Generation)
		case sum.Outcome == "up" && !l.Expired(now):
			j.Verdict, j.Reason = VerdictKept, "kept by `vastrun up` until its label expires "+l.Expiry.UTC().Format(time.RFC3339)
		case sum.Outcome != "":
			j.Verdict, j.Reason = VerdictOrphan, fmt.Sprintf("run %s ended (%s) and this instance outlived it", l.RunID, sum.Outcome)
		default:
			j.Verdict, j.Reason = VerdictOrphan, fmt.Sprintf("run %s has no outcome and its lease expired: its controller is gone", l.RunID)
		}
		out = append(out, j)
	}
	return out
}

// TakeOver acquires an orphan's run lease (generation+1) and reads the
// run's journal from the bucket, so that no controller can still act on
// the run while it is destroyed and what the reaper journals extends the
// run's own record. The caller destroys through the returned controller's
// Fence and Reaper hooks, then calls Reaped and Close(ctx, true). now
// stamps the records (the caller's clock).
func TakeOver(ctx context.Context, b teamstate.Backend, h teamstate.Holder, runID string, o teamstate.LeaseOptions, now func() time.Time) (*Controller, error) {
	c := New(Options{Backend: b, Holder: h, Lease: o, Now: now})
	if err := c.acquire(ctx, runID); err != nil {
		return nil, err
	}
	entries, err := teamstate.ReadRunLog(ctx, b, runID)
	if err != nil {
		c.Close(ctx, false) //nolint:errcheck // the read error is the one to report
		return nil, err
	}
	recs, err := records(runID, entries)
	if err != nil {
		c.Close(ctx, false) //nolint:errcheck // the decode error is the one to report
		return nil, err
	}
	c.mu.Lock()
	c.recs = recs
	c.mu.Unlock()
	return c, nil
}

// reapReason is why the reaper destroys an instance, in its records.
const reapReason = "reap --team: orphan of an ended or abandoned run"

// Reaper journals each destroy attempt in the run's own journal, as the
// engine's teardown does (intent before the call, done after), so the
// run's state and summary see the instance go. Destroying is the safe
// side effect: a failed write does not hold it back, and the fence on the
// lease refuses the call anyway once the run is lost.
func (c *Controller) Reaper() (onIntent, onDone func(provider.InstanceID)) {
	return func(id provider.InstanceID) {
			c.record(runstate.StepDestroy, "intent", runstate.InstanceData{Instance: id, Reason: reapReason}) //nolint:errcheck // see above
		}, func(id provider.InstanceID) {
			c.record(runstate.StepDestroy, "done", runstate.InstanceData{Instance: id, Reason: reapReason}) //nolint:errcheck // see above
		}
}

// Reaped journals the outcome of a reap under the taken-over lease: the
// confirmation (via: how absence was shown), or the failure. The run's
// summary follows, so `runs --all` no longer lists a confirmed instance
// as live.
func (c *Controller) Reaped(id provider.InstanceID, via []string, derr error) error {
	if derr != nil {
		return c.record(runstate.StepDestroy, "failed", runstate.InstanceData{Instance: id, Reason: "reap --team: " + derr.Error()})
	}
	return c.record(runstate.StepConfirm, "done", runstate.InstanceData{Instance: id, Via: via})
}

// SettleReaped settles the run's line in the team ledger once the reaper
// has confirmed the destruction of every instance the run rented: the run
// has ended (a run whose controller died ends here), so its reservation
// is released, replaced by its journaled charges or, where none were
// read, its estimate (Basis says which). Nothing is written when the run
// reserved nothing (no team budget) or was settled already, nor while an
// instance may still bill or a create's result is unknown; settled says
// whether the line was settled now.
func (c *Controller) SettleReaped(ctx context.Context) (s Settlement, settled bool, err error) {
	c.mu.Lock()
	recs := append([]journal.Record(nil), c.recs...)
	c.mu.Unlock()
	st, err := runstate.Replay(recs)
	if err != nil {
		return Settlement{}, false, fmt.Errorf("settle run %s: %w", c.run, err)
	}
	s, ok := settlement(st, true)
	if !ok {
		return s, false, nil
	}
	period := Period(st.Started)
	l, _, err := ReadLedger(ctx, c.o.Backend, period)
	if err != nil {
		return s, false, fmt.Errorf("settle run %s: %w", c.run, err)
	}
	if line := l.Runs[c.run]; line == nil || line.SettledUSD != nil {
		return s, false, nil
	}
	settled, err = Settle(ctx, c.o.Backend, period, c.run, s, c.o.Now())
	if err != nil {
		return s, false, fmt.Errorf("settle run %s: %w", c.run, err)
	}
	return s, settled, nil
}
