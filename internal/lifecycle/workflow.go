package lifecycle

import (
	"context"
	"time"

	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Workflow is what one workflow (ci, up, canary, train) adds to the shared
// lifecycle. The shared steps call it where workflows differ and never
// branch on a workflow's name: a new workflow is a new implementation, not
// edits to freeze, approve and settle.
type Workflow interface {
	// Name is the workflow's name in the journal, manifest and receipt.
	Name() string
	// Spec keeps the workflow's own sections of the spec spec.Build made
	// from the configuration and drops the others (a ci run does not
	// freeze a train: section it never reads), once, before the freeze.
	Spec(m *Manifest)
	// JobBound is how much of the job's time the worst case approved
	// before renting must cover, read from the frozen manifest.
	JobBound(m Manifest) time.Duration
	// Local is the workflow's own local step, after the freeze and before
	// anything is rented, on new and resumed runs alike (nil: go on).
	Local(ctx context.Context) error
	// Outcome maps how the run ended to the workflow's outcome; base is
	// the shared classification of err (see Outcome).
	Outcome(err error, base receipt.Outcome) receipt.Outcome
	// Finish completes the workflow's report after teardown (before the
	// evidence is uploaded).
	Finish(ctx context.Context)
	// Section puts the workflow's report into its section of the receipt.
	Section(r *Receipt)
	// WorkPhase is how the workflow's own work on the instance is shown:
	// its progress phase (progress.Phase*) and the bound it runs under (0:
	// none).
	WorkPhase(m Manifest) (phase string, bound time.Duration)
	// Interruptions is how the workflow meets an interruptible rental's
	// loss: what it does when outbid (config.OnOutbid*; "" for none) and
	// how many rentals one provisioning may try (0: the core's default).
	Interruptions(m Manifest) (onOutbid string, maxAttempts int)
}

// plainWorkflow is a workflow with no section of its own: ci, up, and the
// runs that exec and down begin.
type plainWorkflow struct{ name string }

func (w plainWorkflow) Name() string                                        { return w.name }
func (plainWorkflow) Spec(m *Manifest)                                      { m.DropSections() }
func (plainWorkflow) Finish(context.Context)                                {}
func (plainWorkflow) Local(context.Context) error                           { return nil }
func (plainWorkflow) Section(*Receipt)                                      {}
func (plainWorkflow) JobBound(m Manifest) time.Duration                     { return frozenDuration(m.JobTimeout) }
func (plainWorkflow) Outcome(_ error, base receipt.Outcome) receipt.Outcome { return base }
func (plainWorkflow) WorkPhase(m Manifest) (string, time.Duration) {
	return progress.PhaseTest, frozenDuration(m.JobTimeout)
}
func (plainWorkflow) Interruptions(Manifest) (string, int) { return "", 0 }

// frozenDuration reads a duration the manifest froze (0 when absent).
func frozenDuration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// frozen is the run's spec as frozen (or, after --accept-config-change, as
// accepted): what is rented, at what price, under which budget, is read
// from it, never from the live config, once the run has been frozen.
func (e *Run) Frozen() Manifest { return e.manifest }

// workflow is the run's workflow; a run begun without one (exec, down)
// gets a plain one under its name.
func (e *Run) workflow() Workflow {
	if e.flow == nil {
		e.flow = plainWorkflow{name: e.Workflow}
	}
	return e.flow
}

// The frozen deadlines.
func (e *Run) readyDeadline() time.Duration { return frozenDuration(e.manifest.ReadyDeadline) }
func (e *Run) jobTimeout() time.Duration    { return frozenDuration(e.manifest.JobTimeout) }
func (e *Run) TeardownLimit() time.Duration { return frozenDuration(e.manifest.TeardownLimit) }
