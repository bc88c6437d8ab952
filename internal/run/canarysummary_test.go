package run

import (
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/canary"
)

func TestSummaryShowsTheCanaryDelta(t *testing.T) {
	r := &Receipt{Workflow: "canary", Outcome: CanaryOutputDelta, Canary: &CanaryReport{
		Local:      SmokeOutcome{Where: "host-cpu", Passed: true, Server: &canary.ServerReport{Ready: true, Attempts: 2, Stopped: "term", Passed: true}},
		GPU:        &SmokeOutcome{Where: "gpu", Passed: true},
		Comparison: CanaryOutputDelta,
		Delta:      []FieldDelta{{Field: "asr_model", Local: "base", GPU: ""}, {Field: "models[]", Local: []any{"a|b"}, GPU: nil}},
	}}
	md := Summary(r)
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
