package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
)

// Saved plans (vastrun plan / vastrun apply). A plan is a run stopped at
// its first approval: Propose walks a flow's own steps — gate, paths,
// checks, freeze, then the workflow's provisioning up to the approval —
// and stops where the approver would be asked, so what is planned is what
// the run would have asked approval for, through the same code, and
// nothing is rented. Draft is the spec a run of the flow would freeze now,
// without the run's own facts: what a saved plan binds and apply compares.

// Proposal is what a run of a flow would ask approval for, and how it got
// there.
type Proposal struct {
	// Plan is what the approver would have been shown.
	Plan Plan
	// Draft is the spec the run froze, without its run's facts (Draft).
	Draft Manifest
	// Decisions are the offers judged for it, eligible first, cheapest
	// first (the chosen one among them).
	Decisions []policy.Decision
	// CeilingWorstCase is the worst case at the ceiling: the most an
	// approval of Plan may spend, a replacement for a taken offer included.
	CeilingWorstCase float64
	// Gate says whether the gate ran: "passed", "none" (no gate:), or
	// "skipped".
	Gate string
}

// errProposed stops a proposed run where its approval would be asked.
var errProposed = errors.New("stopped at the approval: nothing is rented while planning")

// ErrNeverAsked means a flow ended without asking for approval, so it has
// no plan (it rents nothing).
var ErrNeverAsked = errors.New("the workflow ended without asking approval to rent")

// Propose runs flow f on s up to its first approval and stops there. s
// must be new (New); its state and evidence directories should be
// scratch ones, since the run exists only to be planned: no teardown,
// evidence upload or receipt follows (nothing was rented). With skipGate
// the gate step is not run.
func Propose(ctx context.Context, s *Scope, f Flow, skipGate bool) (*Proposal, error) {
	var asked *Plan
	approve := s.Approve
	s.Approve = func(p Plan) (bool, error) {
		asked = &p
		return false, errProposed
	}
	defer func() { s.Approve = approve }()
	s.Run = &Run{Deps: s.Deps, flow: &f}
	if err := s.Begin(f.Name); err != nil {
		return nil, err
	}
	defer s.Close() //nolint:errcheck // a scratch run's journal: nothing was rented, and the plan does not depend on it
	if err := os.MkdirAll(s.EvidenceDir, 0o755); err != nil {
		return nil, fmt.Errorf("create evidence directory: %w", err)
	}
	gate := "none"
	if len(s.Frozen().Gate) > 0 {
		gate = "passed"
	}
	for _, st := range f.Steps {
		if st.Name() == stepGate && skipGate {
			gate = "skipped"
			continue
		}
		err := st.Do(ctx, s)
		if asked != nil {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if s.rentAttempted() { // never: the approval comes before every rental
		return nil, fmt.Errorf("internal error: a proposed run attempted a rental; run 'vastrun down --label %s --yes'", s.state.Label)
	}
	if asked == nil {
		return nil, ErrNeverAsked
	}
	d := draft(ctx, s, "", "")
	neutral(&d)
	return &Proposal{Plan: *asked, Draft: d, Decisions: s.selected, CeilingWorstCase: worstCase(s, asked.CeilingDPH, asked.Offer), Gate: gate}, nil
}

// Draft is the spec a new run of f on d's wiring would freeze now, from
// the configuration, the commit and the environment, without the run's own
// facts (run id, label, CI run, evidence directory, creation time): two
// drafts of one configuration at one commit are equal, whenever and
// wherever they are made. Nothing is written.
func Draft(ctx context.Context, d *Deps, f Flow) Manifest {
	own := *d // the caller's wiring stays as it is
	own.Workflow, own.EvidenceDir = f.Name, ""
	s := New(&own)
	s.flow = &f
	m := draft(ctx, s, "", "")
	neutral(&m)
	return m
}

// neutral clears a spec's run facts that differ between two runs of one
// configuration.
func neutral(m *Manifest) {
	m.RunID, m.Label, m.CIRun, m.EvidenceDir, m.CreatedAt = "", "", "", "", time.Time{}
}

// preferOffer makes the offer with id the chosen one when it is eligible
// (a saved plan's offer, still there and still meeting the policy: apply
// rents exactly what was planned rather than a cheaper newcomer).
// decisions keep their order otherwise.
func preferOffer(chosen *provider.Offer, decisions []policy.Decision, id provider.OfferID) *provider.Offer {
	if id == 0 || chosen == nil || chosen.ID == id {
		return chosen
	}
	for i := range decisions {
		if d := &decisions[i]; d.Offer.ID == id && d.Eligible {
			for j := range decisions {
				if decisions[j].Chosen {
					decisions[j].Chosen = false
					decisions[j].Reasons = []string{fmt.Sprintf("eligible, but the saved plan names offer %d", id)}
				}
			}
			d.Chosen = true
			d.Reasons = []string{fmt.Sprintf("chosen: the saved plan's offer, at $%.4f/h", d.TotalDPH)}
			o := d.Offer
			return &o
		}
	}
	return chosen
}
