// Package ci is the acceptance workflow: rent exactly one instance, verify
// it, upload, run the configured test under the job timeout, tear down on
// every path. Its receipt section is the test's outcome (receipt "test");
// its outcome is the shared classification (a non-zero test exit is
// "failed"). [Up] is its split form: the verified instance is kept for
// `exec` and `down`.
//
// The workflow reads only the run's frozen spec ([lifecycle.Scope.Frozen]),
// never the configuration, and names nothing but the core's API.
package ci

import (
	"context"
	"time"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
)

// Name is the workflow's name in the journal, manifest and receipt.
const Name = "ci"

// workflow is ci's part of the lifecycle (lifecycle.Workflow).
type workflow struct {
	e    *lifecycle.Scope
	name string
	test *lifecycle.TestOutcome
}

func (w *workflow) Name() string { return w.name }

// Spec drops the sections of other workflows: a ci run freezes its test.
func (*workflow) Spec(m *lifecycle.Manifest) { m.DropSections() }

// JobBound is the whole job timeout: the test may use all of it.
func (*workflow) JobBound(m lifecycle.Manifest) time.Duration {
	return lifecycle.FrozenDuration(m.JobTimeout)
}

func (*workflow) Local(context.Context) error { return nil }

func (*workflow) Outcome(_ error, base receipt.Outcome) receipt.Outcome { return base }

// WorkPhase: the test runs under the job timeout.
func (*workflow) WorkPhase(m lifecycle.Manifest) (string, time.Duration) {
	return progress.PhaseTest, lifecycle.FrozenDuration(m.JobTimeout)
}

// Interruptions: a ci rental that is outbid fails its test; no policy.
func (*workflow) Interruptions(lifecycle.Manifest) (string, int) { return "", 0 }

func (*workflow) Finish(context.Context) {}

func (w *workflow) Section(r *lifecycle.Receipt) { r.Test = w.test }

// Run runs the whole acceptance step on e (its wiring filled): prepare,
// rent exactly one instance, verify it, run the test, tear down on every
// path. It always returns a receipt once the run has begun.
func Run(ctx context.Context, e *lifecycle.Scope) (*lifecycle.Receipt, error) {
	w := &workflow{e: e, name: Name}
	return e.Drive(ctx, w, false, func(ctx context.Context, c *remote.Client, inst provider.Instance) error {
		t0 := e.Now()
		if err := e.Verify(ctx, c, inst); err != nil {
			return err
		}
		return w.testOn(ctx, c, inst, t0)
	})
}

// Resume continues a ci run whose controller died (e opened with Open).
// Its frozen manifest must match the configuration (see
// lifecycle.Scope.Resume). A live instance of the run is re-attached to, never
// rented again; one that is gone or not running is destroyed and
// replaced. The test runs again (how its interrupted run ended is
// unknown), then teardown and receipt.
func Resume(ctx context.Context, e *lifecycle.Scope) (*lifecycle.Receipt, error) {
	w := &workflow{e: e, name: Name}
	return e.Resume(ctx, w, func(ctx context.Context, c *remote.Client, inst provider.Instance) error {
		return w.testOn(ctx, c, inst, e.Now())
	})
}

// Up prepares and provisions, leaving a verified instance running for
// later `exec` and `down` calls. A failure tears down what it rented.
func Up(ctx context.Context, e *lifecycle.Scope) (*lifecycle.Receipt, error) {
	w := &workflow{e: e, name: "up"}
	return e.Drive(ctx, w, true, func(ctx context.Context, c *remote.Client, inst provider.Instance) error {
		if err := e.Verify(ctx, c, inst); err != nil {
			return err
		}
		if err := e.Upload(c); err != nil {
			return &lifecycle.StepError{Step: "upload", Instance: inst.ID, Err: err}
		}
		return nil
	})
}

// testOn uploads and runs the frozen test on a verified instance.
func (w *workflow) testOn(ctx context.Context, c *remote.Client, inst provider.Instance, t0 time.Time) error {
	e := w.e
	if err := e.Upload(c); err != nil {
		return &lifecycle.StepError{Step: "upload", Instance: inst.ID, Err: err}
	}
	e.AddTiming("verify", e.Now().Sub(t0))
	env, err := e.TestEnv()
	if err != nil {
		return err
	}
	test := e.Frozen().Test
	e.Infof("running the test on instance %d: %s", inst.ID, test)
	e.Mark("test_start")
	t0 = e.Now()
	res, err := e.Work(ctx, c, test, env)
	e.Mark("test_end")
	e.AddTiming("test", e.Now().Sub(t0))
	w.test = res
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &lifecycle.TestFailedError{Code: res.ExitCode}
	}
	e.Infof("the test passed")
	return nil
}
