package report_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
	"github.com/vastrun/vastrun/internal/spec"
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

// A receipt rebuilt after a crash is complete: commit, image and budget
// from the frozen manifest (checked against the journal's hash), the
// estimate from the rented time, the charges the journal recorded, how to
// go on, and no zero time in its JSON.
func TestRebuiltReceiptTakesTheFrozenManifest(t *testing.T) {
	state := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	dir := filepath.Join(state, "runs", "ddd1")
	m := spec.Manifest{Schema: spec.SchemaV2, RunID: "ddd1", Workflow: "train", Commit: "0123abcd", Image: "ghcr.io/acme/t@sha256:" + strings.Repeat("ab", 32), MaxSpendUSD: 2}
	hash, body, err := m.Hash()
	if err != nil {
		t.Fatal(err)
	}
	writeRun(t, state, "ddd1", "train", t0, func(j *journal.Journal) {
		j.Append("done", "freeze", map[string]any{"manifest_sha256": hash})
		j.Append("intent", "rent", map[string]any{"offer_id": 7, "dph_total": 0.36})
		j.Append("done", "rent", map[string]any{"instance_id": 42})
		j.Append("done", "confirm", map[string]any{"instance_id": 42, "via": []string{"show"}})
		j.Append("event", "charges", map[string]any{"charges": map[string]float64{"42": 0.0011}})
		j.Append("intent", "rent", map[string]any{"offer_id": 8, "dph_total": 0.36})
		j.Append("done", "rent", map[string]any{"instance_id": 43})
		j.Append("event", "checkpoint", map[string]any{"step": 100})
	})
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	recs, _ := journal.Read(dir)
	r, err := report.Receipt(dir, recs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commit != m.Commit || r.Image != m.Image || r.Cost.MaxSpendUSD != 2 {
		t.Fatalf("from the manifest: commit %q image %q budget %v", r.Commit, r.Image, r.Cost.MaxSpendUSD)
	}
	// 42 rented 10 s at $0.36/h, 43 rented until the last record (10 s).
	if want := 2 * 0.36 * 10 / 3600; math.Abs(r.Cost.EstimateUSD-want) > 1e-6 {
		t.Fatalf("estimate %v, want %v", r.Cost.EstimateUSD, want)
	}
	if r.Cost.ChargedUSD == nil || *r.Cost.ChargedUSD != 0.0011 {
		t.Fatalf("charged %v", r.Cost.ChargedUSD)
	}
	if n := r.Next(); !strings.Contains(n, "vastrun resume ddd1 --yes") || !strings.Contains(n, "vastrun down --run ddd1 --yes") {
		t.Fatalf("next %q", n)
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), "0001-01-01") {
		t.Fatalf("a zero time in %s", b)
	}
	// A manifest that does not match the journal's hash is not believed.
	os.WriteFile(filepath.Join(dir, "manifest.json"), append(body, ' '), 0o600)
	if r, _ := report.Receipt(dir, recs); r.Commit != "" || r.Image != "" {
		t.Fatalf("an edited manifest was read: %q %q", r.Commit, r.Image)
	}
}

// A run that ended holds its receipt in the journal's outcome record: it
// is given back as it was, even when receipt.json is gone.
func TestReceiptFromTheOutcomeRecord(t *testing.T) {
	state := t.TempDir()
	writeRun(t, state, "eee1", "ci", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), func(j *journal.Journal) {
		j.Append("event", "outcome", map[string]any{"outcome": "passed", "receipt": map[string]any{"schema": receipt.Schema, "run_id": "eee1", "outcome": "passed", "commit": "feed"}})
	})
	dir := filepath.Join(state, "runs", "eee1")
	recs, _ := journal.Read(dir)
	r, err := report.Receipt(dir, recs)
	if err != nil || r.Commit != "feed" || r.Outcome != "passed" || r.Next() != "" {
		t.Fatalf("%v %+v", err, r)
	}
}
