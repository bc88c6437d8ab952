package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// gate runs the config's CPU commands locally; any failure means no rental.
func gate(ctx context.Context, e *Scope) error {
	if len(e.Frozen().Gate) == 0 {
		return nil
	}
	t0 := e.Now()
	defer func() { e.timings.add("gate", e.Now().Sub(t0)) }()
	out, err := e.Sink().Create(filepath.Join(e.EvidenceDir, "gate.log"), 0o644, e.Stream)
	if err != nil {
		return err
	}
	// On the early returns; a gate that passed closes it below and checks.
	defer func() { _ = out.Close() }() // a gate that failed (or was interrupted) says so; its log's tail changes nothing
	// Each stream is masked on its own (see redact.File).
	stdout, stderr := out.Stream(), out.Stream()
	for _, command := range e.Frozen().Gate {
		e.Infof("gate: %s", command)
		if _, err := fmt.Fprintf(out, "$ %s\n", command); err != nil {
			return fmt.Errorf("write gate.log: %w", err)
		}
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Dir, cmd.Stdout, cmd.Stderr = e.RepoDir, stdout, stderr
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			jerr := e.Record("failed", stepGate, map[string]any{"command": command, "error": err.Error()})
			return errors.Join(&StepError{Step: stepGate, Outcome: OutcomeGated, Err: fmt.Errorf("%w: %q: %w", ErrGated, command, err)}, jerr)
		}
	}
	// The log is the gate's evidence: one whose end could not be written
	// fails the gate, as a write refused while a command ran does.
	if err := out.Close(); err != nil {
		return fmt.Errorf("write gate.log: %w", err)
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
	jerr := e.Record("event", stepGate, map[string]any{"skipped": true, "changed_files": len(files)})
	return errors.Join(&StepError{Step: stepPaths, Outcome: OutcomeSkipped, Err: ErrSkipped}, jerr)
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

// settle is the shared end of every workflow: report a panic as an error,
// close SSH, classify the outcome, tear down (unless keeping a successful
// rental), and write the receipt.
func settle(ctx context.Context, e *Scope, recovered any, keep bool, err error) (*receipt.Receipt, error) {
	if recovered != nil {
		e.Log.Error("panic", "value", recovered, "stack", string(debug.Stack()))
		err = fmt.Errorf("internal error (panic): %v", recovered)
	}
	// The beats end first: a teardown that cannot confirm still has the
	// instance's own switch behind it once the TTL passes.
	e.sw.stopBeats()
	if e.Conn != nil {
		_ = e.Conn.Close() // the run is over: the connection's end changes no outcome
		e.Conn = nil
	}
	err = asInterrupted(e, err) // cancel.go: words, not "context canceled"
	outcome := e.workflow().outcome(err, Outcome(err))
	// A run whose journal could not be written never counts as a success,
	// even if the step that hit it did not report it.
	if e.journalErr != nil && err == nil {
		outcome = Outcome(e.journalErr)
	}
	err = withJournalErr(e, err)
	if keep && err == nil {
		outcome = OutcomeUp
	} else if e.rentAttempted() {
		if terr := e.Teardown(ctx); terr != nil {
			err = errors.Join(err, terr)
		}
	}
	e.workflow().finish(ctx, e)
	// After teardown, whatever the outcome: a failed upload joins err
	// without changing the outcome (evidence.go).
	evErr := uploadEvidence(ctx, e)
	r := finish(ctx, e, outcome, err)
	return r, withEvidenceErr(err, evErr, uploadReceipt(ctx, e))
}

// Exec runs script on the run's current instance (opened with Open).
func (e *Scope) Exec(ctx context.Context, script string) (*receipt.TestOutcome, error) {
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
func (e *Scope) ExecInstance(ctx context.Context, id provider.InstanceID, script string) (*receipt.TestOutcome, error) {
	inst, err := e.Market.ShowInstance(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("exec on instance %d: %w", id, err)
	}
	client, err := connect(ctx, e, id, inst, e.Now().Add(2*time.Minute))
	if err != nil {
		return nil, err
	}
	// Close is always nil: it drops the connection once the command's
	// outcome is known.
	defer func() { _ = client.Close() }()
	defer e.Refresh(ctx, client, id)() // an up rental's lease, renewed while the command runs
	env, err := testEnv(e)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return nil, err
	}
	return work(ctx, e, client, script, env)
}

// withJournalErr adds the run's journal error to err, unless err already
// carries one: the teardown goes on past records the journal refused
// (destroying is the safe side), so those fail the run here.
func withJournalErr(e *Scope, err error) error {
	if e.journalErr == nil || errors.Is(err, ErrJournal) {
		return err
	}
	return errors.Join(err, e.journalErr)
}

// Down tears the run down and records the outcome; a teardown whose
// records the journal refused fails it, as it fails a run (settle).
func (e *Scope) Down(ctx context.Context) (*receipt.Receipt, error) {
	return recordDown(ctx, e, e.Teardown(ctx))
}

// recordDown records the run as torn down by a teardown that returned
// terr: Down's end, and DownAll's for each run.
func recordDown(ctx context.Context, e *Scope, terr error) (*receipt.Receipt, error) {
	err := withJournalErr(e, terr)
	evErr := uploadEvidence(ctx, e)
	r := finish(ctx, e, OutcomeDown, err)
	return r, withEvidenceErr(withJournalErr(e, err), evErr, uploadReceipt(ctx, e))
}
