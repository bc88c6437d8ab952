package receipt

import (
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/smoke"
)

func TestSummaryShowsTheCanaryDelta(t *testing.T) {
	c := &CanaryReport{
		Local:      SmokeOutcome{Where: "host-cpu", Passed: true, Server: &smoke.ServerReport{Ready: true, Attempts: 2, Stopped: "term", Passed: true}},
		GPU:        &SmokeOutcome{Where: "gpu", Passed: true},
		Comparison: CanaryOutputDelta,
		Delta:      []FieldDelta{{Field: "asr_model", Local: "base", GPU: ""}, {Field: "models[]", Local: []any{"a|b"}, GPU: nil}},
	}
	md := c.SummaryRows()
	for _, want := range []string{
		"| canary | output_delta |",
		"| local smoke | host-cpu: passed; server ready=true after 2 attempt(s), stopped by term |",
		"| `asr_model` | `\"base\"` | `\"\"` |",
		"| `models[]` | `[\"a\\|b\"]` | (absent) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
}

func TestStoryCanaryShowsComparedFieldsAndValues(t *testing.T) {
	c := &CanaryReport{Comparison: CanaryMatch,
		Local: SmokeOutcome{Result: map[string]any{"checksum": 333833500.0, "device": "cpu", "gpus": []any{}}},
		GPU:   &SmokeOutcome{Result: map[string]any{"checksum": 333833501.0, "device": "gpu", "gpus": []any{"RTX 4090"}}}}
	st := c.Story("")
	if len(st) != 1 || st[0].Title != "Canary comparison: match" {
		t.Fatalf("story: %+v", st)
	}
	// Exact integers (two checksums a digit apart look different), JSON
	// for lists, never Go's notation.
	want := [][2]string{{"checksum", "cpu 333833500 · gpu 333833501"}, {"device", "cpu cpu · gpu gpu"}, {"gpus", `cpu [] · gpu ["RTX 4090"]`}}
	if len(st[0].Rows) != len(want) || st[0].Rows[0] != want[0] || st[0].Rows[1] != want[1] || st[0].Rows[2] != want[2] {
		t.Fatalf("rows: %q, want %q", st[0].Rows, want)
	}
}

func TestPartsFollowTheReceiptOrder(t *testing.T) {
	if p := (Sections{}).Parts(); len(p) != 0 {
		t.Fatalf("no sections gave %d parts", len(p))
	}
	c, tr := &CanaryReport{}, &TrainReport{}
	p := Sections{Train: tr, Canary: c}.Parts()
	if len(p) != 2 || p[0] != Part(c) || p[1] != Part(tr) {
		t.Fatalf("parts: %#v", p)
	}
}
