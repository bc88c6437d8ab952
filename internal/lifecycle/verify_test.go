package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// atConnect injects faults into the instance the moment its connect
// condition is journaled True: after the first SSH connection answered,
// before verify's probe runs. It reports whether it fired.
func atConnect(h *harness, faults ...sim.Fault) *bool {
	fired := new(bool)
	h.engine.JournalFault = func(r journal.Record) error {
		var c runstate.Condition
		if *fired || r.Type != "condition" || r.Step != "connect" || r.Decode(&c) != nil || !c.IsTrue() {
			return nil
		}
		*fired = true
		for _, f := range faults {
			f.Instance = int64(c.Instance)
			if err := h.sim.Inject(f); err != nil {
				h.t.Errorf("inject %s: %v", f.Kind, err)
			}
		}
		return nil
	}
	return fired
}

// The connection drops as verify starts and the next 8 connections are
// refused: the client's own redials (6 dials) run out, and the probe has
// no answer. That is no verdict on the instance: verify asks again and
// the run passes. (It once read the empty output as "nvidia-smi listed no
// GPU" and ended verify_failed.)
func TestVerifyTransportFailureIsAskedAgain(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	fired := atConnect(h, sim.Fault{Kind: sim.FaultSSHRefuse, Count: 8}, sim.Fault{Kind: sim.FaultSSHDrop})
	r, err := ci.Run(context.Background(), h.engine)
	if !*fired {
		t.Fatal("the faults were never injected")
	}
	if err != nil || r.Outcome != lifecycle.OutcomePassed {
		t.Fatalf("outcome %v, err %v\nui:\n%s", r.Outcome, err, h.ui)
	}
	if c := h.engine.State().Condition("verify"); !c.IsTrue() {
		t.Fatalf("verify condition %+v", c)
	}
	if v := h.evidence("verify.json"); strings.Contains(v, `"ok": false`) {
		t.Fatalf("a check failed:\n%s", v)
	}
	if got := h.sim.Snapshot(); len(got.Gone) != 1 || got.SSHFaultsFired != 1 {
		t.Fatalf("want one rental and the drop to have acted: %+v", got)
	}
	h.noLeaks()
}

// Preempted as verify starts: the probe can never answer. The run is a
// readiness failure wrapping ErrNoAnswer, never verify_failed, and the
// instance is destroyed.
func TestVerifyOnAStoppedInstanceIsNoAnswer(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	fired := atConnect(h, sim.Fault{Kind: sim.FaultPreempt}, sim.Fault{Kind: sim.FaultSSHDrop})
	r, err := ci.Run(context.Background(), h.engine)
	if !*fired {
		t.Fatal("the faults were never injected")
	}
	if !errors.Is(err, lifecycle.ErrNoAnswer) || r == nil || r.Outcome != lifecycle.OutcomeReadyFailed {
		t.Fatalf("outcome %v, err %v; want ready_failed wrapping ErrNoAnswer", r.Outcome, err)
	}
	if c := h.engine.State().Condition("verify"); c.IsTrue() || c.Reason != string(lifecycle.OutcomeReadyFailed) {
		t.Fatalf("verify condition %+v", c)
	}
	h.noLeaks()
}
