package report_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/report"
)

func writeRun(t *testing.T, state, id, workflow string, start time.Time, recs func(j *journal.Journal)) {
	t.Helper()
	now := start
	j, err := journal.Open(filepath.Join(state, "runs", id), func() time.Time { now = now.Add(10 * time.Second); return now })
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Append("event", "start", map[string]any{"run_id": id, "label": "vastrun-" + id, "workflow": workflow}); err != nil {
		t.Fatal(err)
	}
	if recs != nil {
		recs(j)
	}
}

func TestListNewestFirstWithLiveInstancesAndCost(t *testing.T) {
	state := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	writeRun(t, state, "aaa1", "ci", t0, func(j *journal.Journal) {
		j.Append("event", "outcome", map[string]any{"outcome": "passed"})
	})
	writeRun(t, state, "aaa2", "up", t0.Add(time.Hour), func(j *journal.Journal) {
		j.Append("intent", "rent", map[string]any{"offer_id": 7, "dph_total": 0.36})
		j.Append("done", "rent", map[string]any{"instance_id": 42})
	})
	os.MkdirAll(filepath.Join(state, "runs", "aaa0"), 0o755)
	os.WriteFile(filepath.Join(state, "runs", "aaa0", journal.FileName), []byte("{not json\n"), 0o600)
	os.WriteFile(filepath.Join(state, "current"), []byte("aaa2\n"), 0o600)

	// 30 minutes after the rent: 0.36 $/h * 0.5 h.
	rented := t0.Add(time.Hour + 30*time.Second)
	got, err := report.List(state, rented.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].RunID != "aaa2" || got[1].RunID != "aaa1" || got[2].RunID != "aaa0" {
		t.Fatalf("order: %+v", got)
	}
	up := got[0]
	if !up.Latest || up.Outcome != report.OutcomeUnfinished || len(up.LiveInstances) != 1 || up.LiveInstances[0] != 42 {
		t.Fatalf("live run: %+v", up)
	}
	if up.CostUSD != 0.18 || up.CostSource != "estimate" || up.WallSeconds != 20 {
		t.Fatalf("cost/wall: %+v", up)
	}
	if ci := got[1]; ci.Latest || ci.Outcome != "passed" || len(ci.LiveInstances) != 0 || ci.LiveInstances == nil {
		t.Fatalf("finished run: %+v", ci)
	}
	if d := got[2]; d.Outcome != "damaged" || d.Error == "" {
		t.Fatalf("damaged run: %+v", d)
	}
}

func TestListEmptyStateDir(t *testing.T) {
	got, err := report.List(filepath.Join(t.TempDir(), "none"), time.Now())
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
}
