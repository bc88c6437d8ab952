package team_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// A reaper that takes an abandoned run over journals the destruction in
// the run's own journal, so the run's summary (runs --all) stops listing
// the instance as live and billing, and a replay of the bucket's journal
// sees it confirmed destroyed.
func TestReapUpdatesSummary(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	b := teamstate.NewMemory(clk)
	opts := teamstate.LeaseOptions{TTL: 30 * time.Second, Clock: clk}

	// A controller rents instance 101 and dies: its lease is never released.
	dead := team.New(team.Options{Backend: b, Holder: teamstate.Holder{Host: "a", ID: teamstate.NewID()}, Lease: opts, Now: clk.Now})
	mirror, err := dead.Hook("r1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []struct {
		typ, step string
		data      any
	}{
		{"event", runstate.StepStart, runstate.StartData{RunID: "r1", Label: "vastrun-r1", Workflow: "ci"}},
		{"intent", runstate.StepRent, runstate.RentIntent{Offer: 7, Attempt: receipt.Attempt{DPHTotal: 0.1798}}},
		{"done", runstate.StepRent, runstate.InstanceData{Instance: 101}},
	} {
		data, _ := json.Marshal(r.data)
		if err := mirror(journal.Record{V: journal.Version, Seq: i + 1, Time: clk.Now(), Type: r.typ, Step: r.step, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := dead.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	s, err := team.ReadSummary(ctx, b, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Live) != 1 || s.DPH != 0.1798 {
		t.Fatalf("before the reap: live %v at $%g/h, want [101] at $0.1798/h", s.Live, s.DPH)
	}

	clk.Advance(time.Minute) // past the TTL on the server's clock
	c, err := team.TakeOver(ctx, b, teamstate.Holder{Host: "reaper", ID: teamstate.NewID()}, "r1", opts, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	onIntent, onDone := c.Reaper()
	onIntent(101)
	onDone(101)
	if err := c.Reaped(101, []string{"show", "label_listing"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}

	s, err = team.ReadSummary(ctx, b, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Live) != 0 || s.DPH != 0 || len(s.Instances) != 1 || s.Generation != 2 {
		t.Fatalf("after the reap: live %v at $%g/h, instances %v, generation %d; want none, $0, [101], 2", s.Live, s.DPH, s.Instances, s.Generation)
	}
	recs, err := team.Materialize(ctx, b, "r1", t.TempDir(), redact.NewSink(redact.New()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := runstate.Replay(recs)
	if err != nil {
		t.Fatal(err)
	}
	a := st.AttemptFor(provider.InstanceID(101))
	if a == nil || !a.Confirmed || a.DestroySentAt.IsZero() || len(st.Unconfirmed()) != 0 {
		t.Fatalf("the bucket's journal replays to %+v (unconfirmed %v); want 101 destroyed, confirmed", a, st.Unconfirmed())
	}
	rows, err := team.List(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Lease != team.LeaseReleased || len(rows[0].Live) != 0 {
		t.Fatalf("listing %+v: want one run, lease released, nothing live", rows)
	}
}
