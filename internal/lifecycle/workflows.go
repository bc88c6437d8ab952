package lifecycle

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
func gate(ctx context.Context, e *Scope) error {
	if len(e.Frozen().Gate) == 0 {
		return nil
	}
	t0 := e.Now()
	defer func() { e.timings.add("gate", e.Now().Sub(t0)) }()
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
	for _, command := range e.Frozen().Gate {
		e.Infof("gate: %s", command)
		fmt.Fprintf(out, "$ %s\n", command)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Dir, cmd.Stdout, cmd.Stderr = e.RepoDir, out, out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.Record("failed", stepGate, map[string]any{"command": command, "error": err.Error()})
			return &StepError{Step: stepGate, Outcome: OutcomeGated, Err: fmt.Errorf("%w: %q: %v", ErrGated, command, err)}
		}
	}
	return e.Record("done", stepGate, map[string]any{"commands": len(e.Frozen().Gate)})
}

// ErrSkipped means the change touches none of the config's paths.
var ErrSkipped = errors.New("the change touches none of the configured paths: GPU step skipped")

// pathsTouched applies the config's paths: filter to the change.
func pathsTouched(ctx context.Context, e *Scope) error {
	if len(e.Frozen().Paths) == 0 {
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
		e.Infof("paths: no base to diff against (pass --base); running the GPU step")
		return nil
	}
	files, err := changedFiles(ctx, e.RepoDir, base)
	if err != nil {
		e.Infof("paths: %v; running the GPU step", err)
		return nil
	}
	for _, f := range files {
		for _, p := range e.Frozen().Paths {
			if MatchGlob(p, f) {
				e.Infof("paths: %s matches %s", f, p)
				return nil
			}
		}
	}
	e.Record("event", stepGate, map[string]any{"skipped": true, "changed_files": len(files)})
	return &StepError{Step: stepPaths, Outcome: OutcomeSkipped, Err: ErrSkipped}
}

// ClassError is an error that names its own outcome class (a workflow's
// verdict, e.g. a canary's comparison): Outcome takes the class as it is.
type ClassError interface {
	error
	OutcomeClass() receipt.Outcome
}

// Outcome classifies a run's error.
func Outcome(err error) receipt.Outcome {
	var se *StepError
	var tf *TestFailedError
	var ce ClassError
	switch {
	case err == nil:
		return OutcomePassed
	case errors.As(err, &ce):
		return ce.OutcomeClass()
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
func prepare(ctx context.Context, e *Scope) error {
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return fmt.Errorf("create evidence directory: %w", err)
	}
	if err := e.reconcileStep(stepGate, 0, func() error { return gate(ctx, e) }); err != nil {
		return err
	}
	if err := e.reconcileStep(stepPaths, 0, func() error { return pathsTouched(ctx, e) }); err != nil {
		return err
	}
	// What the rental will need is checked every time, resumed or not: a
	// resumed run needs its secrets and registry login as much as a new one.
	if err := CheckImagePinned(e.Frozen().Image); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	if _, err := testEnv(e); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	if _, err := imageLogin(e); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	if err := checkEvidenceURI(e); err != nil { // evidence.go
		return &StepError{Step: stepFreeze, Err: err}
	}
	if err := e.reconcileStep(stepFreeze, 0, func() error {
		if e.state.ManifestHash != "" {
			return nil // frozen before (adoptFrozen holds it): never twice
		}
		if err := checkWorkdir(ctx, e); err != nil {
			return &StepError{Step: stepFreeze, Err: err}
		}
		return freeze(ctx, e)
	}); err != nil {
		return err
	}
	return e.workflow().Local(ctx)
}

// Body is a workflow's own work on a verified instance it is connected
// to; its error is the run's (Outcome classifies it).
type Body func(ctx context.Context, c *remote.Client, inst provider.Instance) error

// Drive runs a new run of workflow w: begin, prepare (gate, paths, freeze,
// then w.Local), provision one verified instance (rent, ready, connect,
// verify), then body on it. Teardown and the receipt follow on every path
// (a panic on this goroutine included) unless keep is set and the run
// succeeded. It returns a receipt once the run has begun.
func (e *Scope) Drive(ctx context.Context, w Workflow, keep bool, body Body) (receipt *Receipt, err error) {
	e.flow = w
	if err := e.Begin(w.Name()); err != nil {
		return nil, err
	}
	defer e.Close()
	var client *remote.Client
	defer func() { receipt, err = settle(ctx, e, recover(), client, keep, err) }()
	if err := prepare(ctx, e); err != nil {
		return nil, err
	}
	var inst provider.Instance
	client, inst, err = provision(ctx, e, nil)
	if err != nil {
		return nil, err
	}
	return nil, body(ctx, client, inst)
}

func (e *Run) rentAttempted() bool { return e.state != nil && len(e.state.Attempts) > 0 }

// Resume continues, as workflow w, a run opened with Open whose controller
// died: it adopts the run's frozen manifest (refusing a changed
// configuration unless AcceptConfigChange), walks the same steps as a new
// run (those whose condition is True are skipped), re-attaches to the
// run's live instance or replaces one that is gone, then runs body;
// teardown and the receipt follow on every path.
func (e *Scope) Resume(ctx context.Context, w Workflow, body Body) (receipt *Receipt, err error) {
	e.Workflow, e.flow = w.Name(), w
	if err := adoptFrozen(ctx, e); err != nil {
		e.Close()
		return nil, err
	}
	defer e.Close()
	var client *remote.Client
	defer func() { receipt, err = settle(ctx, e, recover(), client, false, err) }()
	if err := prepare(ctx, e); err != nil { // done steps are not repeated
		return nil, err
	}
	var exclude []int64
	for _, a := range e.state.Attempts {
		if a.Failure != "" {
			exclude = append(exclude, a.MachineID)
		}
	}
	var inst provider.Instance
	if client, inst, err = attach(ctx, e, exclude); err != nil {
		return nil, err
	}
	return nil, body(ctx, client, inst)
}

// settle is the shared end of every workflow: report a panic as an error,
// close SSH, classify the outcome, tear down (unless keeping a successful
// rental), and write the receipt.
func settle(ctx context.Context, e *Scope, recovered any, client *remote.Client, keep bool, err error) (*Receipt, error) {
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
	evErr := uploadEvidence(ctx, e)
	r := finish(ctx, e, outcome, err)
	return r, withEvidenceErr(err, evErr, uploadReceipt(ctx, e))
}

// Exec runs script on the run's current instance (opened with Open).
func (e *Scope) Exec(ctx context.Context, script string) (*TestOutcome, error) {
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
func (e *Scope) ExecInstance(ctx context.Context, id provider.InstanceID, script string) (*TestOutcome, error) {
	inst, err := e.Market.ShowInstance(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("exec on instance %d: %w", id, err)
	}
	client, err := connect(ctx, e, id, inst, e.Now().Add(2*time.Minute))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	env, err := testEnv(e)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return nil, err
	}
	return work(ctx, e, client, script, env)
}

// Down tears the run down and records the outcome.
func (e *Scope) Down(ctx context.Context) (*Receipt, error) {
	err := e.Teardown(ctx)
	evErr := uploadEvidence(ctx, e)
	r := finish(ctx, e, OutcomeDown, err)
	return r, withEvidenceErr(err, evErr, uploadReceipt(ctx, e))
}
