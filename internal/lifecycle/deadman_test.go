package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// fakeSwitch stands in for the on-instance agent in the core's tests (the
// real one is this vastrun binary, driven by the script scenarios): it
// records each arm and answers as an armed switch that wants no beats.
type fakeSwitch struct {
	mu   sync.Mutex
	arms []agent.ArmRequest
	ids  []provider.InstanceID
	err  error
}

func (f *fakeSwitch) Arm(_ context.Context, _ *remote.Client, inst provider.InstanceID, req agent.ArmRequest) (agent.ArmResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arms, f.ids = append(f.arms, req), append(f.ids, inst)
	if f.err != nil {
		return agent.ArmResult{}, f.err
	}
	return agent.ArmResult{Schema: agent.ArmSchema, SchemaVersion: agent.SchemaVersion, Armed: true, TTL: req.TTL, Bound: req.Bound, ClockSpeed: 1}, nil
}

func (f *fakeSwitch) OpenHeartbeat(context.Context, *remote.Client, provider.InstanceID) (agent.HeartbeatPipe, error) {
	return nil, errors.New("the fake switch takes no beats")
}

// A flow that provisions without arming the switch right after is refused
// before anything is begun, let alone rented.
func TestExecuteRefusesAFlowWithoutTheDeadMan(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	for _, steps := range [][]lifecycle.Step{
		append(lifecycle.LocalSteps(), lifecycle.Provision, lifecycle.Upload),
		append(lifecycle.LocalSteps(), lifecycle.Provision),
		append(lifecycle.LocalSteps(), lifecycle.Provision, lifecycle.Upload, lifecycle.DeadMan),
	} {
		_, err := lifecycle.Execute(context.Background(), h.engine, lifecycle.Flow{Name: "ci", Steps: steps})
		if !errors.Is(err, lifecycle.ErrNoDeadMan) {
			t.Fatalf("%d steps: %v, want ErrNoDeadMan", len(steps), err)
		}
	}
	if _, err := os.Stat(filepath.Join(h.engine.StateRoot, "runs")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused flow began a run: %v", err)
	}
	if n := len(h.sim.Snapshot().Live) + len(h.sim.Snapshot().Gone); n != 0 {
		t.Fatalf("a refused flow rented %d instances", n)
	}
}

// Every rental is armed once, right after it is verified, with the frozen
// TTL and the run's own bound; the plan and the receipt say so.
func TestEveryRentalIsArmed(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	sw := h.engine.Switch.(*fakeSwitch)
	var plans []lifecycle.Plan
	h.engine.Approve = func(p lifecycle.Plan) (bool, error) { plans = append(plans, p); return true, nil }
	r, err := ci.Run(context.Background(), h.engine)
	if err != nil {
		t.Fatalf("ci: %v\n%s", err, h.ui)
	}
	h.noLeaks()
	if len(sw.arms) != 1 || sw.ids[0] != r.Attempts[0].InstanceID {
		t.Fatalf("arms %+v on %v, want one on instance %d", sw.arms, sw.ids, r.Attempts[0].InstanceID)
	}
	// ready 10m + job 5m + teardown 4m (the default)
	want := agent.ArmRequest{TTL: agent.Duration(3 * time.Minute), Bound: agent.Duration(19 * time.Minute), Run: r.RunID}
	if got := sw.arms[0]; got != want {
		t.Fatalf("armed %+v, want %+v", got, want)
	}
	dm := r.Attempts[0].DeadMan
	if dm == nil || dm.TTL != "3m0s" || dm.Bound != "19m0s" || dm.ArmedAt.IsZero() || dm.SimClockSpeed != 0 {
		t.Fatalf("receipt's dead_man: %+v", dm)
	}
	if len(plans) != 1 || plans[0].DeadMan == nil || plans[0].DeadMan.TTL != 3*time.Minute || plans[0].DeadMan.Lease ||
		!strings.Contains(strings.Join(plans[0].DeadMan.Lines(), "\n"), "not heard from for 3m0s") {
		t.Fatalf("plan: %+v", plans)
	}
	if !strings.Contains(h.ui.String(), "dead-man switch armed on instance") {
		t.Fatalf("ui:\n%s", h.ui)
	}
}

// up's TTL is its lease: no bound, and the plan says what renews it.
func TestUpIsArmedWithALease(t *testing.T) {
	h := newHarness(t, baseConfig+"  heartbeat_ttl: 45m\n", true)
	sw := h.engine.Switch.(*fakeSwitch)
	var plans []lifecycle.Plan
	h.engine.Approve = func(p lifecycle.Plan) (bool, error) { plans = append(plans, p); return true, nil }
	if _, err := ci.Up(context.Background(), h.engine); err != nil {
		t.Fatalf("up: %v\n%s", err, h.ui)
	}
	if len(sw.arms) != 1 || sw.arms[0].TTL != agent.Duration(45*time.Minute) || sw.arms[0].Bound != 0 {
		t.Fatalf("arms %+v", sw.arms)
	}
	if len(plans) != 1 || !plans[0].DeadMan.Lease || !strings.Contains(plans[0].DeadMan.Lines()[0], "45m0s after a vastrun command") {
		t.Fatalf("plan: %+v", plans[0].DeadMan)
	}
}

// A switch that cannot be armed fails the run before the work, and the
// rental is torn down like any other failure.
func TestASwitchThatCannotBeArmedFailsTheRun(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	h.engine.Switch.(*fakeSwitch).err = agent.ErrSchema // another protocol: final at once
	r, err := ci.Run(context.Background(), h.engine)
	if err == nil || !errors.Is(err, agent.ErrSchema) || !strings.Contains(err.Error(), "arm the dead-man switch") {
		t.Fatalf("err %v", err)
	}
	h.noLeaks()
	if r == nil || r.Test != nil || !r.Cleanup.Confirmed {
		t.Fatalf("receipt: %+v", r)
	}
}

// An instance whose shell cannot run the agent (127: a binary without its
// loader reads "not found"; 126: not executable) answers so on every try:
// the run fails on the first, not at the ready deadline.
func TestAnAgentTheInstanceCannotRunFailsAtOnce(t *testing.T) {
	for _, code := range []int{126, 127} {
		h := newHarness(t, baseConfig, true)
		sw := h.engine.Switch.(*fakeSwitch)
		sw.err = fmt.Errorf("agent arm on instance 1: %w: /bin/sh: .vastrun/bin/vastrun: not found", &remote.ExitError{Code: code})
		_, err := ci.Run(context.Background(), h.engine)
		var ee *remote.ExitError
		if !errors.As(err, &ee) || ee.Code != code {
			t.Fatalf("exit %d: err %v", code, err)
		}
		sw.mu.Lock()
		arms := len(sw.arms)
		sw.mu.Unlock()
		if arms != 1 {
			t.Fatalf("exit %d: armed %d times, want 1 (no retry runs it)", code, arms)
		}
		h.noLeaks()
	}
}
