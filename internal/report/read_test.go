package report_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
)

// A run whose controller was killed wrote no receipt: `vastrun report`
// shows what its journal tells, the live instance under cleanup.
func TestReceiptOfAnUnfinishedRunComesFromItsJournal(t *testing.T) {
	state := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	writeRun(t, state, "bbb1", "train", t0, func(j *journal.Journal) {
		j.Append("intent", "rent", map[string]any{"offer_id": 7, "dph_total": 0.36})
		j.Append("done", "rent", map[string]any{"instance_id": 42})
		j.Append("intent", "rent", map[string]any{"offer_id": 8, "dph_total": 0.40})
		j.Append("done", "rent", map[string]any{"instance_id": 43})
		j.Append("done", "confirm", map[string]any{"instance_id": 42, "via": []string{"id"}})
	})
	dir := filepath.Join(state, "runs", "bbb1")
	recs, err := journal.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := report.Receipt(dir, recs)
	if err != nil {
		t.Fatal(err)
	}
	if r.RunID != "bbb1" || r.Workflow != "train" || string(r.Outcome) != report.OutcomeUnfinished || r.Schema != receipt.Schema {
		t.Fatalf("identity: %+v", r)
	}
	if len(r.Attempts) != 2 || r.Cleanup.Confirmed || len(r.Cleanup.Unconfirmed) != 1 || r.Cleanup.Unconfirmed[0] != 43 {
		t.Fatalf("cleanup: %+v attempts %d", r.Cleanup, len(r.Attempts))
	}
	if !r.FinishedAt.Equal(recs[len(recs)-1].Time) || r.Timings == nil {
		t.Fatalf("finished %v, want the last record's %v", r.FinishedAt, recs[len(recs)-1].Time)
	}

	// With an outcome and every instance confirmed, cleanup is confirmed.
	writeRun(t, state, "bbb2", "ci", t0, func(j *journal.Journal) {
		j.Append("event", "outcome", map[string]any{"outcome": "passed"})
	})
	recs2, _ := journal.Read(filepath.Join(state, "runs", "bbb2"))
	r2, err := report.JournalReceipt(recs2)
	if err != nil || r2.Outcome != "passed" || !r2.Cleanup.Confirmed || len(r2.Cleanup.Unconfirmed) != 0 {
		t.Fatalf("%v %+v", err, r2)
	}
}

// A run that wrote a receipt is reported from it, not rebuilt; a receipt
// that does not parse is an error naming it.
func TestReceiptPrefersTheWrittenOne(t *testing.T) {
	state, ev := t.TempDir(), t.TempDir()
	writeRun(t, state, "ccc1", "ci", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), nil)
	dir := filepath.Join(state, "runs", "ccc1")
	sf, _ := json.Marshal(map[string]string{"evidence_dir": ev})
	os.WriteFile(filepath.Join(dir, "state.json"), sf, 0o600)
	if got := report.EvidenceDir(dir); got != ev {
		t.Fatalf("EvidenceDir %q, want %q", got, ev)
	}
	written := receipt.Receipt{Schema: receipt.Schema, RunID: "ccc1", Outcome: "passed", Workflow: "ci"}
	written.Cleanup.Confirmed = true
	b, _ := json.Marshal(written)
	os.WriteFile(filepath.Join(ev, "receipt.json"), b, 0o600)
	recs, _ := journal.Read(dir)
	r, err := report.Receipt(dir, recs)
	if err != nil || r.Outcome != "passed" || !r.Cleanup.Confirmed {
		t.Fatalf("%v %+v", err, r)
	}
	os.WriteFile(filepath.Join(ev, "receipt.json"), []byte("{"), 0o600)
	if _, err := report.Receipt(dir, recs); err == nil || !strings.Contains(err.Error(), filepath.Join(ev, "receipt.json")) {
		t.Fatalf("err %v, want one naming the receipt", err)
	}
	if got := report.EvidenceDir(t.TempDir()); got != "" {
		t.Fatalf("no state.json: %q", got)
	}
}
