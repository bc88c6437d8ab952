package ci

import (
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
)

// ci freezes only the shared spec and its test; its approval covers the
// whole job timeout; its outcome is the shared classification; its
// receipt section is the test's outcome.
func TestWorkflowContract(t *testing.T) {
	w := &workflow{name: Name, test: &lifecycle.TestOutcome{ExitCode: 3}}
	m := lifecycle.Manifest{Test: "make test", JobTimeout: "5m0s", Train: &lifecycle.TrainSpec{}, Canary: &lifecycle.CanarySpec{}}
	w.Spec(&m)
	if m.Train != nil || m.Canary != nil || m.Test != "make test" {
		t.Fatalf("spec: %+v", m)
	}
	if got := w.JobBound(m); got != 5*time.Minute {
		t.Fatalf("job bound %s", got)
	}
	if got := w.Outcome(&lifecycle.TestFailedError{Code: 3}, receipt.Failed); got != receipt.Failed {
		t.Fatalf("outcome %s", got)
	}
	var r lifecycle.Receipt
	w.Section(&r)
	if r.Test == nil || r.Test.ExitCode != 3 {
		t.Fatalf("section: %+v", r.Test)
	}
}
