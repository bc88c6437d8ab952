package report_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
)

// down --all and plain down's refusal: which runs still hold instances.
func TestLiveRuns(t *testing.T) {
	state := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rent := func(j *journal.Journal, id int) {
		j.Append("intent", "rent", map[string]any{"offer_id": id, "dph_total": 0.3})
		j.Append("done", "rent", map[string]any{"instance_id": id})
	}
	writeRun(t, state, "r3", "up", t0, func(j *journal.Journal) { rent(j, 30) })              // live
	writeRun(t, state, "r1", "ci", t0, func(j *journal.Journal) { rent(j, 10); rent(j, 11) }) // both live
	writeRun(t, state, "r2", "ci", t0, func(j *journal.Journal) {                             // all confirmed: not live
		rent(j, 20)
		j.Append("done", "confirm", map[string]any{"instance_id": 20})
		j.Append("event", "outcome", map[string]any{"outcome": "passed"})
	})
	writeRun(t, state, "r4", "ci", t0, func(j *journal.Journal) { // a create never answered, no outcome
		j.Append("intent", "rent", map[string]any{"offer_id": 40, "dph_total": 0.3})
	})
	writeRun(t, state, "r5", "ci", t0, func(j *journal.Journal) { // the same, but the run ended
		j.Append("intent", "rent", map[string]any{"offer_id": 50, "dph_total": 0.3})
		j.Append("event", "outcome", map[string]any{"outcome": "rent_failed"})
	})
	os.MkdirAll(filepath.Join(state, "runs", "r0"), 0o755) // damaged: left out
	os.WriteFile(filepath.Join(state, "runs", "r0", journal.FileName), []byte("{"), 0o600)

	live := report.LiveRuns(state)
	var ids []string
	for _, l := range live {
		ids = append(ids, l.RunID)
	}
	if !reflect.DeepEqual(ids, []string{"r1", "r3", "r4"}) {
		t.Fatalf("live %v, want [r1 r3 r4]", ids)
	}
	if l := live[0]; !reflect.DeepEqual(l.Unconfirmed, []provider.InstanceID{10, 11}) || l.Ambiguous || l.Label != "vastrun-r1" || l.Dir != filepath.Join(state, "runs", "r1") {
		t.Fatalf("r1: %+v", l)
	}
	if l := live[2]; !l.Ambiguous || len(l.Unconfirmed) != 0 {
		t.Fatalf("r4: %+v", l)
	}

	os.WriteFile(filepath.Join(state, "current"), []byte("r3\n"), 0o600)
	if got := report.Latest(state); got != "r3" {
		t.Fatalf("latest %q", got)
	}
	if others := report.Others(live, "r3"); len(others) != 2 || others[0].RunID != "r1" || others[1].RunID != "r4" {
		t.Fatalf("others %+v", others)
	}
	if others := report.Others(live[1:2], "r3"); len(others) != 0 {
		t.Fatalf("only the latest is live, yet others %+v", others)
	}
	if got := report.WithLabel(state, "vastrun-r2"); got != filepath.Join(state, "runs", "r2") {
		t.Fatalf("WithLabel %q", got)
	}
	if got := report.WithLabel(state, "vastrun-nope"); got != "" {
		t.Fatalf("WithLabel of an unknown label %q", got)
	}
	if report.LiveRuns(filepath.Join(state, "none")) != nil || report.Latest(filepath.Join(state, "none")) != "" {
		t.Fatal("an empty state dir has live runs")
	}
}

func TestNewlyConfirmed(t *testing.T) {
	a := func(id provider.InstanceID, confirmed bool) *receipt.Attempt {
		return &receipt.Attempt{InstanceID: id, Confirmed: confirmed}
	}
	for _, tc := range []struct {
		name          string
		before, after []*receipt.Attempt
		want          []provider.InstanceID
	}{
		{"one destroyed now", []*receipt.Attempt{a(1, false)}, []*receipt.Attempt{a(1, true)}, []provider.InstanceID{1}},
		{"confirmed by an earlier down is not news", []*receipt.Attempt{a(1, true), a(2, false)}, []*receipt.Attempt{a(1, true), a(2, true)}, []provider.InstanceID{2}},
		{"not confirmed yet", []*receipt.Attempt{a(1, false)}, []*receipt.Attempt{a(1, false)}, []provider.InstanceID{}},
		{"a create never answered has no id", nil, []*receipt.Attempt{a(0, true)}, []provider.InstanceID{}},
		{"an extra found by label counts once", nil, []*receipt.Attempt{a(3, true), a(3, true)}, []provider.InstanceID{3}},
	} {
		if got := report.NewlyConfirmed(tc.before, tc.after); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
