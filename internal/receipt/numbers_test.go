package receipt

import (
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

// Numbers read as numbers and lists as lists wherever people read a
// receipt: no exponent, no Go map[…] or […] notation.
func TestPeopleReadNumbersAndListsAsWritten(t *testing.T) {
	tr := &TrainReport{CheckpointURI: "file:///ckpt", Resumes: []ResumeProof{},
		Result: map[string]any{"loss": 0.0000004, "steps": 120000000.0, "per_class": map[string]any{"a": 0.5}, "seen": []any{"x", "y"}}}
	var metrics string
	for _, s := range tr.Story("") {
		for _, row := range s.Rows {
			if row[0] == "final metrics" {
				metrics = row[1]
			}
		}
	}
	if want := `loss 0.0000004, per_class {"a":0.5}, seen ["x","y"], steps 120000000`; metrics != want {
		t.Errorf("final metrics %q, want %q", metrics, want)
	}
	r := &Receipt{Workflow: "ci", Outcome: "passed", Cleanup: Cleanup{Unconfirmed: []provider.InstanceID{30511001, 30511002}}, Timings: map[string]float64{}}
	md := Summary(r)
	if !strings.Contains(md, "NOT CONFIRMED: 30511001, 30511002") || strings.Contains(md, "[30511001") {
		t.Errorf("summary's cleanup row:\n%s", md)
	}
}
