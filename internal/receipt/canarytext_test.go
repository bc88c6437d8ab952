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
		Local: SmokeOutcome{Result: map[string]any{"checksum": 333833500.0, "device": "cpu"}},
		GPU:   &SmokeOutcome{Result: map[string]any{"checksum": 333833500.0, "device": "gpu"}}}
	st := c.Story("")
	if len(st) != 1 || st[0].Title != "Canary comparison: match" {
		t.Fatalf("story: %+v", st)
	}
	want := [][2]string{{"checksum", "cpu 3.338335e+08 · gpu 3.338335e+08"}, {"device", "cpu cpu · gpu gpu"}}
	if len(st[0].Rows) != len(want) || st[0].Rows[0] != want[0] || st[0].Rows[1] != want[1] {
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
