package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vastrun/vastrun/internal/receipt"
)

// Step is one phase of a run. Execute runs a flow's steps in order and
// skips a step that is Done: a step whose outcome the journal already
// holds is never repeated, so a resumed run walks the same list as a new
// one and does only what is left. A step journals its intent before any
// side effect and its outcome after; its error ends the run's steps
// (teardown, evidence and the receipt still follow).
type Step interface {
	// Name is the step's name in the journal.
	Name() string
	// Done reports whether the run's journal already holds the step's
	// outcome as a success.
	Done(s *Scope) bool
	// Do performs the step.
	Do(ctx context.Context, s *Scope) error
}

// onceStep is a step whose journaled condition, once True, skips it:
// what it checked or wrote holds for the whole run (the gate passed, the
// manifest is frozen). Its condition is journaled when it ends; a
// condition that cannot be journaled fails it.
type onceStep struct {
	name string
	do   func(ctx context.Context, s *Scope) error
}

func (o onceStep) Name() string       { return o.name }
func (o onceStep) Done(s *Scope) bool { return s.state.Condition(o.name).IsTrue() }
func (o onceStep) Do(ctx context.Context, s *Scope) error {
	return s.journalCondition(o.name, 0, o.do(ctx, s))
}

// everyStep runs whenever its run does: a check of what the rental needs,
// or work on the instance that is observed afresh by each controller.
type everyStep struct {
	name string
	do   func(ctx context.Context, s *Scope) error
}

func (e everyStep) Name() string                           { return e.name }
func (everyStep) Done(*Scope) bool                         { return false }
func (e everyStep) Do(ctx context.Context, s *Scope) error { return e.do(ctx, s) }

// NewStep makes a workflow's own step: it runs every time its run does
// (a workflow's work on the instance is repeated by a resumed run, since
// how its interrupted try ended is unknown).
func NewStep(name string, do func(ctx context.Context, s *Scope) error) Step {
	return everyStep{name: name, do: do}
}

// The shared steps, in the order a workflow lists them.
var (
	// Gate runs the configuration's CPU commands locally; a failure
	// means nothing is rented.
	Gate Step = onceStep{stepGate, gate}
	// Paths skips the run when no changed file matches paths:.
	Paths Step = onceStep{stepPaths, pathsTouched}
	// Checks checks what the rental will need, every time, resumed or
	// not: a pinned image, the declared secrets, the registry login,
	// the evidence URI. A resumed run needs them as much as a new one.
	Checks Step = everyStep{"checks", checks}
	// Freeze writes the manifest (after the workdir check) before
	// anything is rented; a resumed run's is already frozen.
	Freeze Step = onceStep{stepFreeze, freezeOnce}
	// Provision connects to a verified instance: the run's live one
	// (after a controller restart), or a replacement for one that is
	// gone, or a new rental (select, approve, rent, ready, connect,
	// verify, each journaled). It never rents while the journal's
	// current instance may still be alive.
	Provision Step = everyStep{"provision", provisionStep}
	// Upload copies the frozen upload list (or the workdir archive) to
	// the connected instance.
	Upload Step = everyStep{"upload", uploadStep}
)

// LocalSteps are the steps before anything is rented, which every
// workflow that rents starts with.
func LocalSteps() []Step { return []Step{Gate, Paths, Checks, Freeze} }

func checks(_ context.Context, e *Scope) error {
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
	return nil
}

func freezeOnce(ctx context.Context, e *Scope) error {
	if e.state.ManifestHash != "" {
		return nil // frozen before (adoptFrozen holds it): never twice
	}
	if err := checkWorkdir(ctx, e); err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	return freeze(ctx, e)
}

func provisionStep(ctx context.Context, e *Scope) error {
	// Machines where an earlier attempt failed are never rented again.
	var exclude []int64
	for _, a := range e.state.Attempts {
		if a.Failure != "" {
			exclude = append(exclude, a.MachineID)
		}
	}
	c, inst, err := attach(ctx, e, exclude)
	if err != nil {
		return err
	}
	e.Conn, e.Inst = c, inst
	return nil
}

func uploadStep(_ context.Context, e *Scope) error {
	t0 := e.Now()
	defer func() { e.timings.add("verify", e.Now().Sub(t0)) }() // the receipt counts the upload with the verify
	to := e.uploadTo
	if to == nil {
		if e.Conn == nil {
			return &StepError{Step: "upload", Instance: e.Inst.ID, Err: errors.New("no connection to the instance")}
		}
		to = e.Conn
	}
	if err := upload(e, to); err != nil {
		return &StepError{Step: "upload", Instance: e.Inst.ID, Err: err}
	}
	return nil
}

// Execute runs flow f on s: a new run when s holds none yet (it begins
// one), or the run s opened (Open), which continues where its journal
// ends: its frozen manifest is adopted (a changed configuration is
// refused unless AcceptConfigChange) and every step that is Done is
// skipped; a run whose journal says it finished is not run again: its
// receipt is given back with a *FinishedError (finished.go). Teardown,
// the workflow's finish, the evidence upload and the
// receipt follow on every path, a panic on this goroutine included,
// unless f keeps a successful rental. It returns a receipt once the run
// has begun.
func Execute(ctx context.Context, s *Scope, f Flow) (rec *receipt.Receipt, err error) {
	if err := checkDeadMan(f); err != nil {
		if s.opened {
			s.Close() //nolint:errcheck // releases the opened journal; the refusal is the error
		}
		return nil, err // before anything: no rental without its switch
	}
	if !s.opened {
		// A new run of its own, whatever s ran before.
		s.Run = &Run{Deps: s.Deps, flow: &f}
		if err := s.Begin(f.Name); err != nil {
			return nil, err
		}
	} else {
		s.opened = false
		s.Workflow, s.flow = f.Name, &f
		if s.state.Finished() { // never run again (finished.go)
			defer s.Close() //nolint:errcheck // the journal was only read, or its records are fsync'd: nothing for Close to lose
			return resumeFinished(ctx, s)
		}
		if err := adoptFrozen(ctx, s); err != nil {
			s.Close() //nolint:errcheck // releases the journal's lock; its records are fsync'd as appended, and adoptFrozen's error is the one to report
			return nil, err
		}
	}
	defer s.Close() //nolint:errcheck // releases the journal's lock; its records are fsync'd as appended, so Close has nothing to lose
	defer func() { rec, err = settle(ctx, s, recover(), f.Keep, err) }()
	if err := os.MkdirAll(s.EvidenceDir, 0o755); err != nil {
		return nil, fmt.Errorf("create evidence directory: %w", err)
	}
	for _, st := range f.Steps {
		if st.Done(s) {
			continue
		}
		if err := st.Do(ctx, s); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (e *Run) rentAttempted() bool { return e.state != nil && len(e.state.Attempts) > 0 }
