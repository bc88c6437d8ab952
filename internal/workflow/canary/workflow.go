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
	"github.com/vastrun/vastrun/internal/receipt"
)

// ErrLocalFailed means the local contract failed, so nothing was rented.
var ErrLocalFailed = errors.New("the local contract failed: nothing was rented")

// Name is the workflow's name in the journal, manifest and receipt.
const Name = "canary"

// flow is one canary run: its scope and the canary's own report; Flow
// lists its steps.
type flow struct {
	s                 *lifecycle.Scope
	report            *receipt.CanaryReport
	allowLocalFailure bool
}

func newFlow(e *lifecycle.Scope, allowLocalFailure bool) *flow {
	return &flow{s: e, report: &receipt.CanaryReport{}, allowLocalFailure: allowLocalFailure}
}

// Flow is the canary: the local steps, the local contract (after the
// freeze, before renting), the smallest GPU rental, then the GPU smoke,
// the CUDA check and the comparison. A resumed run walks the same list:
// the local contract runs again — its result is what the GPU side is
// compared with, it is not journaled, and it costs nothing — and a live
// instance is re-attached to, never rented again.
func (e *flow) Flow() lifecycle.Flow {
	return lifecycle.Flow{
		Name: Name,
		Steps: append(lifecycle.LocalSteps(),
			lifecycle.NewStep("local smoke", func(ctx context.Context, _ *lifecycle.Scope) error {
				return e.localContract(ctx, e.allowLocalFailure)
			}),
			lifecycle.Provision, lifecycle.DeadMan,
			lifecycle.NewStep("gpu smoke", func(ctx context.Context, s *lifecycle.Scope) error {
				return e.gpuCanary(ctx, s.Conn, s.Inst)
			})),
		// A canary has no train section.
		Spec: func(m *lifecycle.Manifest) {
			m.Train = nil
			if m.Canary == nil {
				m.Canary = &lifecycle.CanarySpec{}
			}
		},
		// The comparison's class for a run that went through.
		Outcome: func(err error, base receipt.Outcome) receipt.Outcome {
			if c := e.report; err == nil && c.Comparison != "" {
				return receipt.Outcome(c.Comparison)
			}
			return base
		},
		Section: func(r *receipt.Receipt) { r.Canary = e.report },
	}
}

// canarySpec is the frozen contract.
func (e *flow) canarySpec() lifecycle.CanarySpec {
	if c := e.s.Frozen().Canary; c != nil {
		return *c
	}
	return lifecycle.CanarySpec{}
}

func (e *flow) jobTimeout() time.Duration { return lifecycle.FrozenDuration(e.s.Frozen().JobTimeout) }

// Run proves the contract locally, then on the smallest GPU rental (e's
// wiring filled). With allowLocalFailure a failing local side still rents,
// so the receipt can say whether the GPU side fails too.
func Run(ctx context.Context, e *lifecycle.Scope, allowLocalFailure bool) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, e, newFlow(e, allowLocalFailure).Flow())
}

// NewFlow is the canary's flow on e, for a run driven by something else
// than Run (a saved plan: lifecycle.Propose).
func NewFlow(e *lifecycle.Scope, allowLocalFailure bool) lifecycle.Flow {
	return newFlow(e, allowLocalFailure).Flow()
}

// Resume continues a canary run whose controller died (e opened with
// Open), as ci.Resume does: the frozen manifest must match, a live
// instance is re-attached to and never rented again. The local contract
// runs again first — its result is what the GPU side is compared with, it
// is not journaled, and it costs nothing — then the GPU smoke, the CUDA
// check and the comparison.
func Resume(ctx context.Context, e *lifecycle.Scope, allowLocalFailure bool) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, e, newFlow(e, allowLocalFailure).Flow())
}

// Error reports a canary whose GPU outcome disagrees with the local one;
// its class is the comparison's (lifecycle.ClassError).
type Error struct{ Class string }

func (e *Error) Error() string { return "canary: " + e.Class }

// OutcomeClass is the comparison's class.
func (e *Error) OutcomeClass() receipt.Outcome { return receipt.Outcome(e.Class) }

var _ lifecycle.ClassError = (*Error)(nil)
