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

// flow is one training run: the core's API (embedded) plus training's
// own report. It is the run's lifecycle.Workflow.
type flow struct {
	*lifecycle.Scope
	report *receipt.TrainReport
}

func newFlow(e *lifecycle.Scope) *flow { return &flow{Scope: e} }

func (e *flow) Name() string { return Name }

// Spec keeps the train section (spec.Build scoped its store URIs to the
// run); training has no test command and no canary.
func (e *flow) Spec(m *lifecycle.Manifest) {
	m.Test, m.Canary = "", nil
	if m.Train == nil {
		m.Train = &lifecycle.TrainSpec{}
	}
}

// JobBound is 0: approval only needs to afford getting training started;
// the controller's budget check and the agent's deadline bound the rest.
func (e *flow) JobBound(lifecycle.Manifest) time.Duration { return 0 }

func (e *flow) Local(context.Context) error { return nil }

// WorkPhase: training runs under its own runtime deadline.
func (e *flow) WorkPhase(m lifecycle.Manifest) (string, time.Duration) {
	if m.Train == nil {
		return progress.PhaseTrain, 0
	}
	return progress.PhaseTrain, m.Train.Runtime()
}

// Interruptions: train.on_outbid, and train.max_attempts rentals for one
// provisioning (an interruptible rental can be outbid while it boots).
func (e *flow) Interruptions(m lifecycle.Manifest) (string, int) {
	if m.Train == nil {
		return "", 0
	}
	return m.Train.OnOutbid, m.Train.MaxAttempts
}

func (e *flow) Outcome(err error, base receipt.Outcome) receipt.Outcome {
	if errors.Is(err, ErrTrainFailed) {
		return lifecycle.OutcomeFailed
	}
	return base
}

// Finish reads the committed checkpoints from the store.
func (e *flow) Finish(ctx context.Context) {
	e.ensureReport()
	e.fillTrainReport(ctx)
}

func (e *flow) Section(r *lifecycle.Receipt) {
	e.ensureReport()
	r.Train = e.report
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
	if t := e.Frozen().Train; t != nil {
		return *t
	}
	return lifecycle.TrainSpec{}
}

var _ lifecycle.Workflow = (*flow)(nil)
