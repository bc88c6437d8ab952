package train

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/run"
)

// Training's outcome mapping: a workload that exited non-zero is
// "failed", whatever wraps it; anything else keeps the shared class.
func TestOutcomeMapping(t *testing.T) {
	f := newFlow(&run.Engine{})
	for _, c := range []struct {
		err  error
		base receipt.Outcome
		want receipt.Outcome
	}{
		{fmt.Errorf("%w (exit status 3; see train.log)", ErrTrainFailed), receipt.Error, receipt.Failed},
		{nil, receipt.Passed, receipt.Passed},
		{errors.New("budget"), receipt.Budget, receipt.Budget},
	} {
		if got := f.Outcome(c.err, c.base); got != c.want {
			t.Errorf("Outcome(%v, %s) = %s, want %s", c.err, c.base, got, c.want)
		}
	}
}

// Training freezes its own section only: no test command, no canary, and
// a train section even for a config without one (the zero spec).
func TestSpecKeepsOnlyTrainsSection(t *testing.T) {
	m := run.Manifest{Test: "make test", Canary: &run.CanarySpec{Smoke: "s"}}
	newFlow(&run.Engine{}).Spec(&m)
	if m.Test != "" || m.Canary != nil || m.Train == nil {
		t.Fatalf("%+v", m)
	}
	if (&flow{}).JobBound(run.Manifest{JobTimeout: "1h"}) != 0 {
		t.Fatal("training's approval bound is its start, not the job timeout")
	}
}
