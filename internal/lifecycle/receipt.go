package lifecycle

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

type timings map[string]float64 // phase → seconds

func (t *timings) add(phase string, d time.Duration) {
	if *t == nil {
		*t = timings{}
	}
	(*t)[phase] = round3((*t)[phase] + d.Seconds()) // a sum of rounded figures is not rounded
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// toWallClock rewrites a receipt measured on a scaled clock in wall-clock
// terms, keeping the simulated figures under SimTime.
func toWallClock(r *receipt.Receipt, sc *clock.Scaled) {
	r.SimTime = &receipt.SimTime{Speed: sc.Factor, Timings: r.Timings, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
	wall := make(map[string]float64, len(r.Timings))
	for k, v := range r.Timings {
		wall[k] = round3(v / sc.Factor)
	}
	r.Timings = wall
	r.StartedAt, r.FinishedAt = sc.Wall(r.StartedAt).UTC(), sc.Wall(r.FinishedAt).UTC()
	attempts := make([]*receipt.Attempt, len(r.Attempts))
	for i, a := range r.Attempts {
		c := *a
		for _, t := range []*time.Time{&c.IntentAt, &c.RentedAt, &c.RunningAt, &c.DestroySentAt, &c.ConfirmedAt} {
			if !t.IsZero() {
				*t = sc.Wall(*t).UTC()
			}
		}
		c.PriceIncreases = append([]receipt.PriceIncrease(nil), c.PriceIncreases...)
		for j := range c.PriceIncreases {
			p := &c.PriceIncreases[j]
			p.At = sc.Wall(p.At).UTC()
			if !p.ContractEnd.IsZero() {
				p.ContractEnd = sc.Wall(p.ContractEnd).UTC()
			}
		}
		if c.DeadMan != nil {
			dm := *c.DeadMan
			dm.ArmedAt = sc.Wall(dm.ArmedAt).UTC()
			c.DeadMan = &dm
		}
		attempts[i] = &c
	}
	r.Attempts = attempts
}

// chargesFor reads what Vast charged for the run's instances. Charges can
// lag; a failure leaves ChargedUSD nil rather than zero. The charges of
// instances confirmed destroyed are journaled (`event charges`), so the
// replayed state carries them: the team ledger settles from them. A live
// instance's (`up`) are not: they would go stale as it bills on.
func chargesFor(ctx context.Context, e *Scope) map[provider.InstanceID]float64 {
	ids := e.state.Instances()
	if len(ids) == 0 {
		zero := 0.0
		e.cost.ChargedUSD = &zero
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	charges, err := e.Market.Charges(cctx, provider.ChargeQuery{From: e.state.Started.Add(-24 * time.Hour), To: e.Now().Add(24 * time.Hour)})
	if err != nil {
		e.cost.ChargesNote = "charges could not be read: " + err.Error()
		return nil
	}
	total := 0.0
	byID := map[provider.InstanceID]float64{}
	for _, ch := range charges {
		byID[ch.InstanceID] += ch.Amount
	}
	for _, a := range e.state.Attempts {
		if v, ok := byID[a.InstanceID]; ok && a.InstanceID != 0 {
			total += v
		}
	}
	e.cost.ChargedUSD = &total
	final := map[provider.InstanceID]float64{}
	for _, a := range e.state.Attempts {
		if v, ok := byID[a.InstanceID]; ok && a.InstanceID != 0 && a.Confirmed {
			final[a.InstanceID] = v
		}
	}
	if len(final) > 0 {
		// A failed write leaves them in memory (Record); the receipt has them either way.
		_ = e.Record("event", runstate.StepCharges, runstate.ChargesData{Charges: final})
	}
	bidCharges(e, charges)
	if e.Simulated {
		e.cost.ChargesNote = "simulated charges"
	} else {
		e.cost.ChargesNote = "Vast charges can lag by minutes; re-check with 'vastrun report'"
	}
	return byID
}

// receiptImage is the frozen image (a run gated before its freeze names
// its draft spec's).
func receiptImage(e *Scope) string { return e.Frozen().Image }

// chargedAttempts copies attempts, each with what Vast charged for it.
func chargedAttempts(attempts []*receipt.Attempt, byID map[provider.InstanceID]float64) []*receipt.Attempt {
	out := make([]*receipt.Attempt, 0, len(attempts))
	for _, a := range attempts {
		c := *a
		if v, ok := byID[a.InstanceID]; ok && a.InstanceID != 0 {
			c.Charged = &v
		}
		out = append(out, &c)
	}
	return out
}

// finish records the outcome and writes receipt.json and summary.md.
//
// The outcome record is the run's terminal record (runstate.State.Finished)
// and carries the receipt; it is journaled before receipt.json is
// written, and receipt.json is written from the journal's copy, so a
// crash between the two leaves a run that resume gives the same receipt
// back for (finished.go).
func finish(ctx context.Context, e *Scope, outcome receipt.Outcome, runErr error) *receipt.Receipt {
	if !unapproved(e, outcome) { // nothing happened when nothing was approved
		e.Notify.outcome(e.Run, outcome, runErr)
	}
	charged := chargesFor(ctx, e)
	e.cost.EstimateUSD = round6(e.SpentSoFar())
	e.cost.MaxSpendUSD = e.Frozen().MaxSpendUSD
	if e.cost.ChargedUSD != nil {
		d := round6(*e.cost.ChargedUSD - e.cost.EstimateUSD)
		e.cost.DiscrepancyUSD = &d
	}
	st := e.state
	r := &receipt.Receipt{
		Schema: receipt.Schema, Workflow: e.Workflow, RunID: st.RunID, Label: st.Label, Outcome: outcome,
		Simulated: e.Simulated, SimInstance: e.SimInstance, PlanSHA256: e.PlanSHA256, Commit: e.manifest.Commit, Image: receiptImage(e), ManifestSHA256: st.ManifestHash,
		Attempts: chargedAttempts(st.Attempts, charged), Verify: e.verifyRep, Timings: e.timings, Cost: e.cost,
		StartedAt: st.Started, FinishedAt: e.Now().UTC(), EvidenceDir: e.EvidenceDir, EvidenceUpload: e.evidenceUp,
		CI: receipt.CI{System: e.CI.System, RunID: e.CI.RunID, RunURL: e.CI.RunURL, Repo: e.CI.Repo, Ref: e.CI.Ref, Event: e.CI.EventName},
	}
	e.workflow().section(r)
	r.Attempts = roundedAttempts(r.Attempts)
	if runErr != nil {
		r.Error = e.Redactor.String(runErr.Error())
	}
	if r.Timings == nil {
		r.Timings = map[string]float64{}
	}
	r.Timings["elapsed"] = round3(r.FinishedAt.Sub(st.Started).Seconds())
	// The phases plus "other" add up to elapsed (overheads and the
	// interruption figure are measured inside phases).
	phases := 0.0
	for k, v := range r.Timings {
		if k != "elapsed" && !strings.HasPrefix(k, "overhead_") && !strings.HasPrefix(k, "interruption_") {
			phases += v
		}
	}
	r.Timings["other"] = round3(max(0, r.Timings["elapsed"]-phases))
	if a := st.Current(); a != nil && r.Test != nil && !a.RunningAt.IsZero() {
		// What vastrun adds to the billable time around the test.
		if ts, ok := e.phaseTimes["test_start"]; ok {
			r.Timings["overhead_before_test"] = round3(ts.Sub(a.RunningAt).Seconds())
		}
		if te, ok := e.phaseTimes["test_end"]; ok && !a.DestroySentAt.IsZero() {
			r.Timings["overhead_after_test"] = round3(a.DestroySentAt.Sub(te).Seconds())
		}
	}
	if sc, ok := e.Clock.(*clock.Scaled); ok && sc.Factor != 1 {
		toWallClock(r, sc)
	}
	r.Cleanup = receipt.Cleanup{Confirmed: len(st.Unconfirmed()) == 0, Unconfirmed: st.Unconfirmed(), AlertSent: e.cost.AlertSent}
	if r.Cleanup.Unconfirmed == nil {
		r.Cleanup.Unconfirmed = []provider.InstanceID{}
	}
	r.Cleanup.Warnings = e.cleanupWarnings
	r.Cleanup.LateInstanceIDs = st.Late
	r.Notify = e.Notify.close(ctx, e.Redactor.String)
	if unapproved(e, outcome) {
		terminalRecord(e, runstate.OutcomeData{Outcome: outcome})
		writeFinalState(e)
		forgetAsLatest(e)
		return r
	}
	doc := receiptDoc(e, r)
	terminalRecord(e, runstate.OutcomeData{Outcome: outcome, Receipt: validJSON(doc)})
	if len(st.Receipt) > 0 {
		doc = st.Receipt // the journal's copy: what a resume would write
	}
	err := os.MkdirAll(e.EvidenceDir, 0o755)
	if err == nil {
		err = e.writeFileAtomic(filepath.Join(e.EvidenceDir, "receipt.json"), receiptFile(doc), 0o644)
	}
	if err != nil {
		e.Infof("could not write the receipt: %v", err)
	}
	md := e.Redactor.String(receipt.Summary(r))
	if err := e.writeFileAtomic(filepath.Join(e.EvidenceDir, "summary.md"), []byte(md), 0o644); err != nil {
		e.Infof("could not write the receipt's summary: %v", err)
	}
	if err := e.CI.AppendSummary(md); err != nil {
		e.Infof("could not write the CI step summary: %v", err)
	}
	writeFinalState(e)
	return r
}

// writeFinalState writes state.json with the run's outcome once more: the
// terminal record writes it too, but not when the journal refused that
// record (the outcome is then applied in memory only). Scripts and the
// CI's post step read it, so a failed write is said.
func writeFinalState(e *Scope) {
	if err := e.writeStateFile(e.runDir, e.state, e.EvidenceDir); err != nil {
		e.Infof("run %s: state.json, which scripts read, does not say its outcome: %v", e.state.RunID, err)
	}
}

func round6(x float64) float64 { return float64(int64(x*1e6+0.5)) / 1e6 }

// writeSelection records why each offer was chosen or rejected.
func (e *Deps) writeSelection(dir string, ds []policy.Decision) {
	b, _ := json.MarshalIndent(receipt.DecisionRows(ds), "", "  ")
	if os.MkdirAll(dir, 0o755) != nil {
		return // as for the write below: an explanation a run does not fail for
	}
	e.Sink().WriteJSON(filepath.Join(dir, "selection.json"), append(b, '\n'), 0o644) //nolint:errcheck // an explanation beside the receipt, which names the chosen offer: a run does not fail for it
}
