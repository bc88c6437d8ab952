package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
)

// gate runs the config's CPU commands locally; any failure means no rental.
func (e *Engine) gate(ctx context.Context) error {
	if len(e.frozen().Gate) == 0 {
		return nil
	}
	t0 := e.now()
	defer func() { e.timings.add("gate", e.now().Sub(t0)) }()
	f, err := os.OpenFile(filepath.Join(e.EvidenceDir, "gate.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var sink io.Writer = f
	if e.Stream != nil {
		sink = io.MultiWriter(f, e.Stream)
	}
	out := e.Redactor.Writer(sink)
	defer out.Close()
	for _, command := range e.frozen().Gate {
		e.infof("gate: %s", command)
		fmt.Fprintf(out, "$ %s\n", command)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Dir, cmd.Stdout, cmd.Stderr = e.RepoDir, out, out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.record("failed", stepGate, map[string]any{"command": command, "error": err.Error()})
			return &StepError{Step: stepGate, Outcome: OutcomeGated, Err: fmt.Errorf("%w: %q: %v", ErrGated, command, err)}
		}
	}
	return e.record("done", stepGate, map[string]any{"commands": len(e.frozen().Gate)})
}

// ErrSkipped means the change touches none of the config's paths.
var ErrSkipped = errors.New("the change touches none of the configured paths: GPU step skipped")

// pathsTouched applies the config's paths: filter to the change.
func (e *Engine) pathsTouched(ctx context.Context) error {
	if len(e.frozen().Paths) == 0 {
		return nil
	}
	base := e.Base
	if base == "" {
		switch {
		case e.Getenv("GITHUB_BASE_REF") != "":
			base = "origin/" + e.Getenv("GITHUB_BASE_REF")
		case e.Getenv("CI_MERGE_REQUEST_DIFF_BASE_SHA") != "":
			base = e.Getenv("CI_MERGE_REQUEST_DIFF_BASE_SHA")
		}
	}
	if base == "" {
		e.infof("paths: no base to diff against (pass --base); running the GPU step")
		return nil
	}
	files, err := changedFiles(ctx, e.RepoDir, base)
	if err != nil {
		e.infof("paths: %v; running the GPU step", err)
		return nil
	}
	for _, f := range files {
		for _, p := range e.frozen().Paths {
			if MatchGlob(p, f) {
				e.infof("paths: %s matches %s", f, p)
				return nil
			}
		}
	}
	e.record("event", stepGate, map[string]any{"skipped": true, "changed_files": len(files)})
	return &StepError{Step: stepPaths, Outcome: OutcomeSkipped, Err: ErrSkipped}
}

// Outcome classifies a run's error.
func Outcome(err error) receipt.Outcome {
	var se *StepError
	var tf *TestFailedError
	var ce *CanaryError
	switch {
	case err == nil:
		return OutcomePassed
	case errors.As(err, &ce):
		return receipt.Outcome(ce.Class)
	case errors.As(err, &tf):
		return OutcomeFailed
	case errors.Is(err, context.Canceled):
		return OutcomeInterrupted
	case errors.As(err, &se) && se.Outcome != "":
		return se.Outcome
	}
	return OutcomeError
}

// prepare runs the local steps in order: gate, paths, freeze (with the
// checks that need no rental), then the workflow's own local step. Each is
// guarded by its journaled condition, so a resumed run walks the same list
// and repeats only what is not done; a resumed run's freeze is already
// True (adoptFrozen loaded and checked the frozen manifest).
func (e *Engine) prepare(ctx context.Context) error {
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return fmt.Errorf("create evidence directory: %w", err)
	}
	if err := e.reconcileStep(stepGate, 0, func() error { return e.gate(ctx) }); err != nil {
		return err
	}
	if err := e.reconcileStep(stepPaths, 0, func() error { return e.pathsTouched(ctx) }); err != nil {
		return err
	}
	// What the rental will need is checked every time, resumed or not: a
	// resumed run needs its secrets and registry login as much as a new one.
	if err := CheckImagePinned(e.frozen().Image); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	if _, err := e.testEnv(); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	if _, err := e.imageLogin(); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	if err := e.checkEvidenceURI(); err != nil { // evidence.go
		return &StepError{Step: stepFreeze, Err: err}
	}
	if err := e.reconcileStep(stepFreeze, 0, func() error {
		if e.state.ManifestHash != "" {
			return nil // frozen before (adoptFrozen holds it): never twice
		}
		if err := e.checkWorkdir(ctx); err != nil {
			return &StepError{Step: stepFreeze, Err: err}
		}
		return e.freeze(ctx)
	}); err != nil {
		return err
	}
	if e.beforeRent != nil {
		return e.beforeRent(ctx)
	}
	return nil
}

// RunCI runs the whole acceptance step: prepare, rent exactly one instance,
// verify it, run the test, and tear down on every path. It always returns
// a receipt once the run has begun.
func (e *Engine) RunCI(ctx context.Context) (*Receipt, error) {
	return e.drive(ctx, "ci", false, func(client *remote.Client, inst provider.Instance) error {
		return e.verifyAndTest(ctx, client, inst)
	})
}

// Up prepares and provisions, leaving a verified instance running for
// later `exec` and `down` calls. A failure tears down what it rented.
func (e *Engine) Up(ctx context.Context) (*Receipt, error) {
	return e.drive(ctx, "up", true, func(client *remote.Client, inst provider.Instance) error {
		if err := e.verify(ctx, client, inst); err != nil {
			return err
		}
		if err := e.upload(client); err != nil {
			return &StepError{Step: "upload", Instance: inst.ID, Err: err}
		}
		return nil
	})
}

// drive runs a workflow: begin, prepare, provision, then body on the
// instance. Teardown runs on every path (including a panic on this
// goroutine) unless keep is set and the workflow succeeded.
func (e *Engine) drive(ctx context.Context, workflow string, keep bool, body func(*remote.Client, provider.Instance) error) (receipt *Receipt, err error) {
	if err := e.Begin(workflow); err != nil {
		return nil, err
	}
	defer e.Close()
	var client *remote.Client
	defer func() { receipt, err = e.settle(ctx, recover(), client, keep, err) }()
	if err := e.prepare(ctx); err != nil {
		return nil, err
	}
	var inst provider.Instance
	client, inst, err = e.provision(ctx, nil)
	if err != nil {
		return nil, err
	}
	return nil, body(client, inst)
}

func (e *Engine) rentAttempted() bool { return e.state != nil && len(e.state.Attempts) > 0 }

// ResumeCI continues a ci run whose controller died (opened with Open).
// Its frozen manifest must match the configuration (see adoptFrozen). A
// live instance of the run is re-attached to, never rented again; one that
// is gone or not running is destroyed and replaced. The test runs again
// (how its interrupted run ended is unknown), then teardown and receipt.
func (e *Engine) ResumeCI(ctx context.Context) (*Receipt, error) {
	return e.resume(ctx, plainWorkflow{name: "ci"}, func(client *remote.Client, inst provider.Instance) error {
		return e.testOn(ctx, client, inst, e.now())
	})
}

// resume is the shared continuation of a run opened with Open: adopt its
// frozen manifest, walk the same steps as a new run (those whose condition
// is True are skipped), re-attach to its live instance or replace it, then
// the workflow's body; teardown and receipt on every path.
func (e *Engine) resume(ctx context.Context, flow Workflow, body func(*remote.Client, provider.Instance) error) (receipt *Receipt, err error) {
	e.Workflow, e.flow = flow.Name(), flow
	if err := e.adoptFrozen(ctx); err != nil {
		e.Close()
		return nil, err
	}
	defer e.Close()
	var client *remote.Client
	defer func() { receipt, err = e.settle(ctx, recover(), client, false, err) }()
	if err := e.prepare(ctx); err != nil { // done steps are not repeated
		return nil, err
	}
	var exclude []int64
	for _, a := range e.state.Attempts {
		if a.Failure != "" {
			exclude = append(exclude, a.MachineID)
		}
	}
	var inst provider.Instance
	if client, inst, err = e.attach(ctx, exclude); err != nil {
		return nil, err
	}
	return nil, body(client, inst)
}

func (e *Engine) verifyAndTest(ctx context.Context, client *remote.Client, inst provider.Instance) error {
	t0 := e.now()
	if err := e.verify(ctx, client, inst); err != nil {
		return err
	}
	return e.testOn(ctx, client, inst, t0)
}

// testOn uploads and runs the test on a verified instance.
func (e *Engine) testOn(ctx context.Context, client *remote.Client, inst provider.Instance, t0 time.Time) error {
	if err := e.upload(client); err != nil {
		return &StepError{Step: "upload", Instance: inst.ID, Err: err}
	}
	e.timings.add("verify", e.now().Sub(t0))
	env, err := e.testEnv()
	if err != nil {
		return err
	}
	e.infof("running the test on instance %d: %s", inst.ID, e.frozen().Test)
	e.mark("test_start")
	t0 = e.now()
	res, err := e.work(ctx, client, e.frozen().Test, env)
	e.mark("test_end")
	e.timings.add("test", e.now().Sub(t0))
	e.test = res
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &TestFailedError{Code: res.ExitCode}
	}
	e.infof("the test passed")
	return nil
}

// settle is the shared end of every workflow: report a panic as an error,
// close SSH, classify the outcome, tear down (unless keeping a successful
// rental), and write the receipt.
func (e *Engine) settle(ctx context.Context, recovered any, client *remote.Client, keep bool, err error) (*Receipt, error) {
	if recovered != nil {
		e.Log.Error("panic", "value", recovered, "stack", string(debug.Stack()))
		err = fmt.Errorf("internal error (panic): %v", recovered)
	}
	if client != nil {
		client.Close()
	}
	outcome := e.workflow().Outcome(err, Outcome(err))
	// A run whose journal could not be written never counts as a success,
	// even if the step that hit it did not report it.
	if e.journalErr != nil && !errors.Is(err, ErrJournal) {
		if err == nil {
			outcome = Outcome(e.journalErr)
		}
		err = errors.Join(err, e.journalErr)
	}
	if keep && err == nil {
		outcome = OutcomeUp
	} else if e.rentAttempted() {
		if terr := e.Teardown(ctx); terr != nil {
			err = errors.Join(err, terr)
		}
	}
	e.workflow().Finish(ctx)
	// After teardown, whatever the outcome: a failed upload joins err
	// without changing the outcome (evidence.go).
	evErr := e.uploadEvidence(ctx)
	r := e.finish(ctx, outcome, err)
	return r, withEvidenceErr(err, evErr, e.uploadReceipt(ctx))
}

// Exec runs script on the run's current instance (opened with Open).
func (e *Engine) Exec(ctx context.Context, script string) (*TestOutcome, error) {
	a := e.state.Current()
	if a == nil || a.InstanceID == 0 || a.Confirmed {
		return nil, fmt.Errorf("run %s has no live instance", e.state.RunID)
	}
	return e.ExecInstance(ctx, a.InstanceID, script)
}

// ExecInstance runs script on instance id over SSH with the run's key,
// attaching it through the API first. For a split CI job on an instance it
// did not rent, call Begin first: the instance is not adopted, since
// destroying it is `down`'s job.
func (e *Engine) ExecInstance(ctx context.Context, id provider.InstanceID, script string) (*TestOutcome, error) {
	inst, err := e.Market.ShowInstance(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("exec on instance %d: %w", id, err)
	}
	client, err := e.connect(ctx, id, inst, e.now().Add(2*time.Minute))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	env, err := e.testEnv()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return nil, err
	}
	return e.work(ctx, client, script, env)
}

// Down tears the run down and records the outcome.
func (e *Engine) Down(ctx context.Context) (*Receipt, error) {
	err := e.Teardown(ctx)
	evErr := e.uploadEvidence(ctx)
	r := e.finish(ctx, OutcomeDown, err)
	return r, withEvidenceErr(err, evErr, e.uploadReceipt(ctx))
}
