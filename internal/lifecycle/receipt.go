package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// ReceiptSchema versions the receipt; docs/receipt.md documents it.
const ReceiptSchema = "vastrun.receipt/v1"

type timings map[string]float64 // phase → seconds

func (t *timings) add(phase string, d time.Duration) {
	if *t == nil {
		*t = timings{}
	}
	(*t)[phase] = round3((*t)[phase] + d.Seconds()) // a sum of rounded figures is not rounded
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

type costReport struct {
	EstimateUSD float64  `json:"estimate_usd"`
	ChargedUSD  *float64 `json:"charged_usd"`
	// DiscrepancyUSD is charged minus estimated, when charges were read.
	DiscrepancyUSD *float64 `json:"discrepancy_usd,omitempty"`
	MaxSpendUSD    float64  `json:"max_spend_usd"`
	ChargesNote    string   `json:"charges_note,omitempty"`
	Interruptible  *BidCost `json:"interruptible,omitempty"` // bid rentals (bidreceipt.go)
	AlertSent      bool     `json:"-"`
}

// Receipt is the run's evidence summary (docs/receipt.md).
type Receipt struct {
	Schema         string          `json:"schema"`
	Workflow       string          `json:"workflow"`
	RunID          string          `json:"run_id"`
	Label          string          `json:"label"`
	Outcome        receipt.Outcome `json:"outcome"`
	Error          string          `json:"error,omitempty"`
	Simulated      bool            `json:"simulated"`
	SimInstance    string          `json:"sim_instance,omitempty"`
	CI             ReceiptCI       `json:"ci"`
	Commit         string          `json:"commit"`
	Image          string          `json:"image"`
	ManifestSHA256 string          `json:"manifest_sha256"`
	Attempts       []*Attempt      `json:"attempts"`
	Test           *TestOutcome    `json:"test,omitempty"`
	Verify         *verifyReport   `json:"verify,omitempty"`
	// The workflows' own sections (train, canary), in their place in
	// the JSON; the core renders them without naming one.
	receipt.Sections
	Timings        map[string]float64 `json:"timings_s"`
	Cost           costReport         `json:"cost"`
	Cleanup        ReceiptCleanup     `json:"cleanup"`
	StartedAt      time.Time          `json:"started_at"`
	FinishedAt     time.Time          `json:"finished_at"`
	EvidenceDir    string             `json:"evidence_dir"`
	EvidenceUpload *EvidenceUpload    `json:"evidence_upload,omitempty"` // evidence.uri's copy (evidence.go)
	// SimTime is set when the simulator ran scaled: the receipt's own times
	// and timings are wall-clock, these are the simulated ones.
	SimTime *SimTime `json:"sim_time,omitempty"`
}

// SimTime labels the figures of a scaled simulator run in simulated time.
type SimTime struct {
	Speed      float64            `json:"speed"`
	Timings    map[string]float64 `json:"timings_s"`
	StartedAt  time.Time          `json:"started_at"`
	FinishedAt time.Time          `json:"finished_at"`
}

// toWallClock rewrites a receipt measured on a scaled clock in wall-clock
// terms, keeping the simulated figures under SimTime.
func (r *Receipt) toWallClock(sc *clock.Scaled) {
	r.SimTime = &SimTime{Speed: sc.Factor, Timings: r.Timings, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
	wall := make(map[string]float64, len(r.Timings))
	for k, v := range r.Timings {
		wall[k] = round3(v / sc.Factor)
	}
	r.Timings = wall
	r.StartedAt, r.FinishedAt = sc.Wall(r.StartedAt).UTC(), sc.Wall(r.FinishedAt).UTC()
	attempts := make([]*Attempt, len(r.Attempts))
	for i, a := range r.Attempts {
		c := *a
		for _, t := range []*time.Time{&c.IntentAt, &c.RentedAt, &c.RunningAt, &c.DestroySentAt, &c.ConfirmedAt} {
			if !t.IsZero() {
				*t = sc.Wall(*t).UTC()
			}
		}
		attempts[i] = &c
	}
	r.Attempts = attempts
}

// ReceiptCI identifies the CI run.
type ReceiptCI struct {
	System string `json:"system,omitempty"`
	RunID  string `json:"run_id,omitempty"`
	RunURL string `json:"run_url,omitempty"`
	Repo   string `json:"repo,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Event  string `json:"event,omitempty"`
}

// ReceiptCleanup says whether every rental is confirmed gone, and how.
type ReceiptCleanup struct {
	Confirmed   bool                  `json:"confirmed"`
	Unconfirmed []provider.InstanceID `json:"unconfirmed_instance_ids"`
	AlertSent   bool                  `json:"alert_sent"`
}

// chargesFor reads what Vast charged for the run's instances. Charges can
// lag; a failure leaves ChargedUSD nil rather than zero.
// The charges go on the receipt's copies of the attempts: the state holds
// only what the journal says.
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
func chargedAttempts(attempts []*Attempt, byID map[provider.InstanceID]float64) []*Attempt {
	out := make([]*Attempt, 0, len(attempts))
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
func finish(ctx context.Context, e *Scope, outcome receipt.Outcome, runErr error) *Receipt {
	e.Record("event", stepOutcome, map[string]any{"outcome": outcome})
	charged := chargesFor(ctx, e)
	e.cost.EstimateUSD = round6(e.SpentSoFar())
	e.cost.MaxSpendUSD = e.Frozen().MaxSpendUSD
	if e.cost.ChargedUSD != nil {
		d := round6(*e.cost.ChargedUSD - e.cost.EstimateUSD)
		e.cost.DiscrepancyUSD = &d
	}
	st := e.state
	r := &Receipt{
		Schema: ReceiptSchema, Workflow: e.Workflow, RunID: st.RunID, Label: st.Label, Outcome: outcome,
		Simulated: e.Simulated, SimInstance: e.SimInstance, Commit: e.manifest.Commit, Image: receiptImage(e), ManifestSHA256: st.ManifestHash,
		Attempts: chargedAttempts(st.Attempts, charged), Verify: e.verifyRep, Timings: e.timings, Cost: e.cost,
		StartedAt: st.Started, FinishedAt: e.Now().UTC(), EvidenceDir: e.EvidenceDir, EvidenceUpload: e.evidenceUp,
		CI: ReceiptCI{System: e.CI.System, RunID: e.CI.RunID, RunURL: e.CI.RunURL, Repo: e.CI.Repo, Ref: e.CI.Ref, Event: e.CI.EventName},
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
		r.toWallClock(sc)
	}
	r.Cleanup = ReceiptCleanup{Confirmed: len(st.Unconfirmed()) == 0, Unconfirmed: st.Unconfirmed(), AlertSent: e.cost.AlertSent}
	if r.Cleanup.Unconfirmed == nil {
		r.Cleanup.Unconfirmed = []provider.InstanceID{}
	}
	if unapproved(e, outcome) {
		writeStateFile(e.runDir, st, e.EvidenceDir)
		forgetAsLatest(e)
		return r
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	b = e.Redactor.JSON(b)
	os.MkdirAll(e.EvidenceDir, 0o755)
	writeFileAtomic(filepath.Join(e.EvidenceDir, "receipt.json"), append(b, '\n'), 0o644)
	md := e.Redactor.String(Summary(r))
	writeFileAtomic(filepath.Join(e.EvidenceDir, "summary.md"), []byte(md), 0o644)
	if err := e.CI.AppendSummary(md); err != nil {
		e.Infof("could not write the CI step summary: %v", err)
	}
	writeStateFile(e.runDir, st, e.EvidenceDir)
	return r
}

func round6(x float64) float64 { return float64(int64(x*1e6+0.5)) / 1e6 }

// Summary renders a receipt as Markdown for people and CI step summaries.
func Summary(r *Receipt) string {
	var b strings.Builder
	icon := map[bool]string{true: "✅", false: "❌"}[r.Outcome.Succeeded()]
	fmt.Fprintf(&b, "## vastrun %s: %s %s\n\n", r.Workflow, icon, r.Outcome)
	if r.Simulated {
		b.WriteString("> Simulated run: nothing was rented or billed for real.\n\n")
		if r.SimInstance != "" {
			fmt.Fprintf(&b, "> Note: %s.\n\n", r.SimInstance)
		}
	}
	if r.SimTime != nil {
		fmt.Fprintf(&b, "> The simulator ran at %g× speed: timings are wall-clock; simulated ones are under sim_time.\n\n", r.SimTime.Speed)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "**Error:** %s\n\n", r.Error)
	}
	fmt.Fprintf(&b, "| | |\n|---|---|\n| run | `%s` |\n| label | `%s` |\n| commit | `%s` |\n| image | `%s` |\n", r.RunID, r.Label, r.Commit, r.Image)
	for i, a := range r.Attempts {
		fmt.Fprintf(&b, "| attempt %d | offer %d → instance %d on machine %d: %s x%d at $%.4f/h, cost %s", i+1, a.OfferID, a.InstanceID, a.MachineID, a.GPUName, a.NumGPUs, a.DPHTotal, attemptCost(r, a))
		if a.Failure != "" {
			fmt.Fprintf(&b, " — ended: %s (%s)", InWords(a.Failure), a.Failure)
		}
		fmt.Fprintf(&b, "; destroyed: %s |\n", map[bool]string{true: "confirmed", false: "**NOT CONFIRMED**"}[a.Confirmed])
	}
	if r.Test != nil {
		fmt.Fprintf(&b, "| test | exit %d |\n", r.Test.ExitCode)
	}
	charged := "n/a"
	if r.Cost.ChargedUSD != nil {
		charged = fmt.Sprintf("$%.4f", *r.Cost.ChargedUSD)
	}
	fmt.Fprintf(&b, "| cost | estimate $%.4f, charged %s, budget $%.2f |\n", r.Cost.EstimateUSD, charged, r.Cost.MaxSpendUSD)
	fmt.Fprintf(&b, "| cleanup | %s |\n", map[bool]string{true: "all instances confirmed destroyed", false: fmt.Sprintf("**NOT CONFIRMED: %v**", r.Cleanup.Unconfirmed)}[r.Cleanup.Confirmed])
	keys := make([]string, 0, len(r.Timings))
	for k := range r.Timings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1fs", k, r.Timings[k]))
	}
	fmt.Fprintf(&b, "| timings | %s |\n", strings.Join(parts, ", "))
	for _, p := range r.Parts() {
		b.WriteString(p.SummaryRows())
	}
	b.WriteString(storyMarkdown(r))
	return b.String()
}

// DecisionRow is one offer's verdict, as selection.json and
// `offers --explain --json` show it.
type DecisionRow struct {
	OfferID   provider.OfferID `json:"offer_id"`
	MachineID int64            `json:"machine_id"`
	GPU       string           `json:"gpu"`
	NumGPUs   int              `json:"num_gpus"`
	TotalDPH  float64          `json:"total_dph"`
	Chosen    bool             `json:"chosen"`
	Eligible  bool             `json:"eligible"`
	Reasons   []string         `json:"reasons"`
}

// DecisionRows turns policy decisions into rows.
func DecisionRows(ds []policy.Decision) []DecisionRow {
	rows := make([]DecisionRow, 0, len(ds))
	for _, d := range ds {
		rows = append(rows, DecisionRow{d.Offer.ID, d.Offer.MachineID, d.Offer.GPUName, d.Offer.NumGPUs, round6(d.TotalDPH), d.Chosen, d.Eligible, d.Reasons})
	}
	return rows
}

// writeSelection records why each offer was chosen or rejected.
func writeSelection(dir string, ds []policy.Decision) {
	b, _ := json.MarshalIndent(DecisionRows(ds), "", "  ")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "selection.json"), append(b, '\n'), 0o644)
}

// WriteExplanation prints decisions as a table for people.
func WriteExplanation(w io.Writer, ds []policy.Decision) {
	for _, d := range ds {
		mark := "  "
		if d.Chosen {
			mark = "=>"
		}
		fmt.Fprintf(w, "%s %d  %s x%d  $%.4f/h  %s\n", mark, d.Offer.ID, d.Offer.GPUName, d.Offer.NumGPUs, d.TotalDPH, strings.Join(d.Reasons, "; "))
	}
}
