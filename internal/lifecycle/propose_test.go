package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/redact"
)

// proposeDeps is a fresh wiring (no run begun) of cfgYAML on m; approve
// answers every approval the run asks.
func proposeDeps(t *testing.T, cfgYAML string, m *fakeMarket, approve func(Plan) (bool, error)) *Deps {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	return &Deps{
		Market: m, Clock: stepClock{clk}, Log: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" },
		Redactor: redact.New(), Approve: approve, Annotations: io.Discard, Config: cfg, RepoDir: repo,
		StateRoot: filepath.Join(root, "state"), EvidenceDir: filepath.Join(root, "evidence"), Jitter: func() float64 { return 0.5 },
	}
}

// proposeFlow is a ci-like flow whose work fails the test if it runs.
func proposeFlow(t *testing.T) Flow {
	return Flow{Name: "ci", Steps: append(LocalSteps(), Provision, NewStep("test", func(context.Context, *Scope) error {
		t.Error("the workflow's work ran while planning")
		return nil
	}))}
}

func TestProposeStopsAtTheApprovalAndRentsNothing(t *testing.T) {
	m := newFakeMarket(offer(11, 1, 0.40), offer(12, 2, 0.30), offer(13, 3, 0.35))
	approver := func(Plan) (bool, error) {
		t.Error("the real approver was asked while planning")
		return true, nil
	}
	d := proposeDeps(t, stepConfig+"gate:\n  - 'true'\n", m, approver)
	s := New(d)
	prop, err := Propose(context.Background(), s, proposeFlow(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := only(m.calls(), "create", "destroy", "attach"); len(got) != 0 {
		t.Fatalf("planning called %v", got)
	}
	if prop.Plan.Offer.ID != 12 || prop.Gate != "passed" || prop.Plan.CeilingDPH != 1.0 {
		t.Fatalf("proposal: offer %d, gate %s, ceiling %v", prop.Plan.Offer.ID, prop.Gate, prop.Plan.CeilingDPH)
	}
	if prop.CeilingWorstCase <= prop.Plan.WorstCase {
		t.Fatalf("worst case at the ceiling %v is not above the offer's %v", prop.CeilingWorstCase, prop.Plan.WorstCase)
	}
	var eligible []provider.OfferID
	for _, dd := range prop.Decisions {
		if dd.Eligible {
			eligible = append(eligible, dd.Offer.ID)
		}
	}
	if !slices.Equal(eligible, []provider.OfferID{12, 13, 11}) {
		t.Fatalf("decisions %v, want the three offers cheapest first", eligible)
	}
	// The approver the run was built with is back in place.
	if s.Approve == nil {
		t.Fatal("Propose left no approver")
	}
	// The draft is the spec without its run's facts, as Draft makes it
	// on another wiring of the same configuration.
	if prop.Draft.RunID != "" || prop.Draft.Label != "" || !prop.Draft.CreatedAt.IsZero() || prop.Draft.Test != "sh scripts/gpu-test.sh" {
		t.Fatalf("draft has run facts or misses the test: %+v", prop.Draft)
	}
	again := Draft(context.Background(), proposeDeps(t, stepConfig+"gate:\n  - 'true'\n", newFakeMarket(), nil), proposeFlow(t))
	h1, _, _ := prop.Draft.Hash()
	h2, _, _ := again.Hash()
	if h1 != h2 {
		t.Fatalf("two drafts of one configuration differ:\n%+v\n%+v", prop.Draft, again)
	}
	changed := Draft(context.Background(), proposeDeps(t, stepConfig+"gate:\n  - 'false'\n", newFakeMarket(), nil), proposeFlow(t))
	if h3, _, _ := changed.Hash(); h3 == h1 {
		t.Fatal("a changed gate: leaves the draft's hash as it was")
	}
}

func TestProposeGate(t *testing.T) {
	cfg := stepConfig + "gate:\n  - 'exit 3'\n"
	_, err := Propose(context.Background(), New(proposeDeps(t, cfg, newFakeMarket(offer(12, 2, 0.30)), nil)), proposeFlow(t), false)
	if !errors.Is(err, ErrGated) {
		t.Fatalf("a failing gate: %v, want ErrGated", err)
	}
	m := newFakeMarket(offer(12, 2, 0.30))
	prop, err := Propose(context.Background(), New(proposeDeps(t, cfg, m, nil)), proposeFlow(t), true)
	if err != nil || prop.Gate != "skipped" {
		t.Fatalf("skipped gate: %v, %+v", err, prop)
	}
	if got := only(m.calls(), "create"); len(got) != 0 {
		t.Fatalf("planning rented: %v", got)
	}
}

func TestProposeOverBudgetIsRefused(t *testing.T) {
	cfg := strings.Replace(stepConfig, "max_spend: 2", "max_spend: 0.1", 1) // ready 10m + job 5m at $0.9/h is over $0.10
	m := newFakeMarket(offer(12, 2, 0.9))
	_, err := Propose(context.Background(), New(proposeDeps(t, cfg, m, nil)), proposeFlow(t), false)
	if Outcome(err) != OutcomeBudget {
		t.Fatalf("over budget: %v (%s)", err, Outcome(err))
	}
	if got := only(m.calls(), "create"); len(got) != 0 {
		t.Fatalf("planning rented: %v", got)
	}
}

// A run applying a plan rents the planned offer while it is eligible,
// even when a cheaper one appeared, and names the plan in its approval.
func TestPreferOfferAndPlanHash(t *testing.T) {
	m := newFakeMarket(offer(11, 1, 0.40), offer(12, 2, 0.30))
	var asked []Plan
	d := proposeDeps(t, stepConfig, m, func(p Plan) (bool, error) { asked = append(asked, p); return true, nil })
	d.PreferOffer, d.PlanSHA256 = 11, "ab12"
	s := New(d)
	s.Run = &Run{Deps: d}
	if err := s.Begin("ci"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := Freeze.Do(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	o, err := selectOffer(context.Background(), s, nil)
	if err != nil || o.ID != 11 {
		t.Fatalf("selected %v, %v; want the preferred offer 11", o, err)
	}
	if err := approve(s, *o, 1); err != nil || len(asked) != 1 {
		t.Fatalf("approve: %v (%d asked)", err, len(asked))
	}
	recs, err := journal.Read(s.RunDir())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recs {
		found = found || r.Type == "done" && r.Step == stepApprove && strings.Contains(string(r.Data), `"plan_sha256":"ab12"`)
	}
	if !found {
		t.Fatal("the approval record does not name the plan")
	}
}

func TestPreferOfferTable(t *testing.T) {
	mk := func() []policy.Decision {
		return []policy.Decision{
			{Offer: provider.Offer{ID: 1}, TotalDPH: 0.1, Eligible: true, Chosen: true},
			{Offer: provider.Offer{ID: 2}, TotalDPH: 0.2, Eligible: true},
			{Offer: provider.Offer{ID: 3}, TotalDPH: 0.3, Eligible: false},
		}
	}
	first := provider.Offer{ID: 1}
	for _, tc := range []struct {
		prefer provider.OfferID
		want   provider.OfferID
	}{{0, 1}, {1, 1}, {2, 2}, {3, 1}, {9, 1}} {
		ds := mk()
		got := preferOffer(&first, ds, tc.prefer)
		if got.ID != tc.want {
			t.Errorf("prefer %d: chose %d, want %d", tc.prefer, got.ID, tc.want)
		}
		chosen := 0
		for _, d := range ds {
			if d.Chosen {
				chosen++
				if d.Offer.ID != tc.want {
					t.Errorf("prefer %d: decision %d marked chosen", tc.prefer, d.Offer.ID)
				}
			}
		}
		if chosen != 1 {
			t.Errorf("prefer %d: %d decisions chosen", tc.prefer, chosen)
		}
	}
}
