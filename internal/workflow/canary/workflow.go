// Package canary is the canary workflow: the smoke contract is proved
// locally first (its unit tests, then the smoke on this machine or in a
// local container), then on the smallest GPU rental, and the two results
// are compared. Its receipt section is receipt.CanaryReport (receipt
// "canary"); its outcome is the comparison's class (match,
// gpu_only_failure, local_only_failure, both_failed, output_delta) once
// the run went through, else the shared classification.
//
// The workflow reads the canary's contract from the run's frozen spec
// (lifecycle.Manifest.Canary), never from the configuration.
package canary

import (
	"context"
	"errors"
	"time"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/receipt"
)

// ErrLocalFailed means the local contract failed, so nothing was rented.
var ErrLocalFailed = errors.New("the local contract failed: nothing was rented")

// Name is the workflow's name in the journal, manifest and receipt.
const Name = "canary"

// flow is one canary run: the core's API (embedded) plus the canary's own
// report. It is the run's lifecycle.Workflow.
type flow struct {
	*lifecycle.Scope
	report            *receipt.CanaryReport
	allowLocalFailure bool
}

func newFlow(e *lifecycle.Scope, allowLocalFailure bool) *flow {
	return &flow{Scope: e, report: &receipt.CanaryReport{}, allowLocalFailure: allowLocalFailure}
}

func (e *flow) Name() string { return Name }

// Spec keeps the canary's contract; a canary has no train section.
func (e *flow) Spec(m *lifecycle.Manifest) {
	m.Train = nil
	if m.Canary == nil {
		m.Canary = &lifecycle.CanarySpec{}
	}
}

// JobBound is the whole job timeout: the GPU smoke may use all of it.
func (e *flow) JobBound(m lifecycle.Manifest) time.Duration {
	return lifecycle.FrozenDuration(m.JobTimeout)
}

// Local is the local contract, after the freeze and before renting.
func (e *flow) Local(ctx context.Context) error { return e.localContract(ctx, e.allowLocalFailure) }

// Outcome is the comparison's class for a run that went through.
func (e *flow) Outcome(err error, base receipt.Outcome) receipt.Outcome {
	if c := e.report; err == nil && c.Comparison != "" {
		return receipt.Outcome(c.Comparison)
	}
	return base
}

func (e *flow) Finish(context.Context) {}

// WorkPhase: the GPU smoke runs under the job timeout.
func (e *flow) WorkPhase(m lifecycle.Manifest) (string, time.Duration) {
	return progress.PhaseTest, lifecycle.FrozenDuration(m.JobTimeout)
}

// Interruptions: a canary rental that is outbid fails its smoke; no policy.
func (e *flow) Interruptions(lifecycle.Manifest) (string, int) { return "", 0 }

func (e *flow) Section(r *lifecycle.Receipt) { r.Canary = e.report }

// canarySpec is the frozen contract.
func (e *flow) canarySpec() lifecycle.CanarySpec {
	if c := e.Frozen().Canary; c != nil {
		return *c
	}
	return lifecycle.CanarySpec{}
}

func (e *flow) jobTimeout() time.Duration { return lifecycle.FrozenDuration(e.Frozen().JobTimeout) }

// Run proves the contract locally, then on the smallest GPU rental (e's
// wiring filled). With allowLocalFailure a failing local side still rents,
// so the receipt can say whether the GPU side fails too.
func Run(ctx context.Context, e *lifecycle.Scope, allowLocalFailure bool) (*lifecycle.Receipt, error) {
	f := newFlow(e, allowLocalFailure)
	return e.Drive(ctx, f, false, f.gpuCanary)
}

// Resume continues a canary run whose controller died (e opened with
// Open), as ci.Resume does: the frozen manifest must match, a live
// instance is re-attached to and never rented again. The local contract
// runs again first — its result is what the GPU side is compared with, it
// is not journaled, and it costs nothing — then the GPU smoke, the CUDA
// check and the comparison.
func Resume(ctx context.Context, e *lifecycle.Scope, allowLocalFailure bool) (*lifecycle.Receipt, error) {
	f := newFlow(e, allowLocalFailure)
	return e.Resume(ctx, f, f.gpuCanary)
}

// Error reports a canary whose GPU outcome disagrees with the local one;
// its class is the comparison's (lifecycle.ClassError).
type Error struct{ Class string }

func (e *Error) Error() string { return "canary: " + e.Class }

// OutcomeClass is the comparison's class.
func (e *Error) OutcomeClass() receipt.Outcome { return receipt.Outcome(e.Class) }

var (
	_ lifecycle.Workflow   = (*flow)(nil)
	_ lifecycle.ClassError = (*Error)(nil)
)

// gpuCanary's signature is a lifecycle.Body.
var _ lifecycle.Body = (*flow)(nil).gpuCanary
