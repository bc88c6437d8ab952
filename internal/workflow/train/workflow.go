// Package train is checkpointed training: the workload runs on a rented
// GPU under the on-instance agent, which commits its checkpoints to the
// run's store; an interrupted instance (preempted, outbid, unreachable) is
// destroyed, confirmed, and replaced, and the workload resumes from the
// last committed checkpoint, proven by the workload's own report. Its
// receipt section is receipt.TrainReport (receipt "train"); a workload that
// exits non-zero is "failed" (ErrTrainFailed).
//
// The workflow reads its settings from the run's frozen spec
// (lifecycle.Manifest.Train), never from the configuration. Approval before
// renting covers getting training started (JobBound 0): the controller's
// budget check, on every monitoring pass, and the agent's own deadline
// bound the rest.
package train

import (
	"context"
	"errors"
	"time"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Name is the workflow's name in the journal, manifest and receipt.
const Name = "train"

// ErrTrainFailed means the workload exited non-zero.
var ErrTrainFailed = errors.New("the training workload failed")

// ErrNotResumed means train.require_resume stopped the run: a replacement
// had nothing to restore, or the workload started below the restored step.
var ErrNotResumed = errors.New("train.require_resume: the workload did not resume")

// flow is one training run: its scope and training's own report; Flow
// lists its steps.
type flow struct {
	s      *lifecycle.Scope
	report *receipt.TrainReport
	// contract watches the current attempt's contract (contract.go), read
	// once per monitoring pass of contractPollEvery.
	contract          *lifecycle.ContractWatch
	contractPollEvery time.Duration
	// started: this controller started a workload (a later start is a
	// restart); notResumed: train.require_resume stops the run with it.
	started    bool
	notResumed error
}

func newFlow(e *lifecycle.Scope) *flow { return &flow{s: e} }

// Flow is training: the local steps, then training itself (attach or
// rent, train and monitor, and on an interruption replace the instance,
// until the workload ends or a limit stops it). A resumed run walks the
// same list and re-attaches to a live instance instead of renting.
func (e *flow) Flow() lifecycle.Flow {
	return lifecycle.Flow{
		Name:  Name,
		Steps: append(lifecycle.LocalSteps(), lifecycle.NewStep("train", func(ctx context.Context, _ *lifecycle.Scope) error { return e.drive(ctx) })),
		// The train section (spec.Build scoped its store URIs to the run);
		// training has no test command and no canary.
		Spec: func(m *lifecycle.Manifest) {
			m.Test, m.Canary = "", nil
			if m.Train == nil {
				m.Train = &lifecycle.TrainSpec{}
			}
			// The dead-man switch's TTL is train.heartbeat_ttl.
			m.HeartbeatTTL = m.Train.HeartbeatTTL
		},
		// Approval only needs to afford getting training started; the
		// controller's budget check and the agent's deadline bound the rest.
		JobBound: func(lifecycle.Manifest) time.Duration { return 0 },
		// Training runs under its own runtime deadline.
		WorkPhase: func(m lifecycle.Manifest) (string, time.Duration) {
			if m.Train == nil {
				return progress.PhaseTrain, 0
			}
			return progress.PhaseTrain, m.Train.Runtime()
		},
		// train.on_outbid, and train.max_attempts rentals for one
		// provisioning (an interruptible rental can be outbid while it boots).
		Interruptions: func(m lifecycle.Manifest) (string, int) {
			if m.Train == nil {
				return "", 0
			}
			return m.Train.OnOutbid, m.Train.MaxAttempts
		},
		Outcome: func(err error, base receipt.Outcome) receipt.Outcome {
			if errors.Is(err, ErrTrainFailed) || errors.Is(err, ErrNotResumed) {
				return lifecycle.OutcomeFailed
			}
			return base
		},
		// Finish reads the committed checkpoints from the store.
		Finish: func(ctx context.Context, _ *lifecycle.Scope) {
			e.ensureReport()
			e.fillTrainReport(ctx)
		},
		Section: func(r *receipt.Receipt) {
			e.ensureReport()
			r.Train = e.report
		},
	}
}

// ensureReport starts the report once the spec is known: each run has its
// own store prefix, so a new run never resumes another's checkpoints, and
// `resume` finds its own again by run id.
func (e *flow) ensureReport() {
	if e.report == nil {
		e.report = &receipt.TrainReport{CheckpointURI: e.trainSpec().CheckpointURI, Resumes: []receipt.ResumeProof{}}
	}
}

// trainSpec is the frozen train section.
func (e *flow) trainSpec() lifecycle.TrainSpec {
	if t := e.s.Frozen().Train; t != nil {
		return *t
	}
	return lifecycle.TrainSpec{}
}
