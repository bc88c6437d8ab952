package lifecycle

import (
	"context"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Flow is one workflow (ci, up, canary, train, exec, down) as data: its
// steps in order, and what it says where workflows differ. Execute runs
// it; the shared steps read these fields and never branch on a
// workflow's name, so a new workflow is a new Flow, not edits to freeze,
// approve and teardown. A nil func field takes the plain default.
type Flow struct {
	// Name is the workflow's name in the journal, manifest and receipt.
	Name string
	// Steps run in order (see Step); teardown, evidence and the receipt
	// are not among them: Execute always runs them, last.
	Steps []Step
	// Keep leaves a successful run's rental running (up).
	Keep bool
	// Spec keeps the workflow's own sections of the spec spec.Build made
	// from the configuration and drops the others, once, before the
	// freeze (default: drop every section).
	Spec func(m *Manifest)
	// JobBound is how much of the job's time the worst case approved
	// before renting must cover (default: the job timeout).
	JobBound func(m Manifest) time.Duration
	// WorkPhase is how the workflow's own work on the instance is shown:
	// its progress phase and the bound it runs under (default: the test
	// under the job timeout).
	WorkPhase func(m Manifest) (phase string, bound time.Duration)
	// Interruptions is how the workflow meets an interruptible rental's
	// loss: what it does when outbid (config.OnOutbid*; "" for none) and
	// how many rentals one provisioning may try (0: the core's default).
	Interruptions func(m Manifest) (onOutbid string, maxAttempts int)
	// Outcome maps how the run ended to the workflow's outcome; base is
	// the shared classification of err (default: base).
	Outcome func(err error, base receipt.Outcome) receipt.Outcome
	// Finish completes the workflow's report after teardown, before the
	// evidence is uploaded.
	Finish func(ctx context.Context, s *Scope)
	// Section puts the workflow's report into its section of the receipt.
	Section func(r *receipt.Receipt)
}

// plainFlow is a flow with no section and no steps of its own: the runs
// exec and down begin or open.
func plainFlow(name string) *Flow { return &Flow{Name: name} }

func (f *Flow) spec(m *Manifest) {
	if f.Spec == nil {
		m.DropSections()
		return
	}
	f.Spec(m)
}

func (f *Flow) jobBound(m Manifest) time.Duration {
	if f.JobBound == nil {
		return frozenDuration(m.JobTimeout)
	}
	return f.JobBound(m)
}

func (f *Flow) workPhase(m Manifest) (string, time.Duration) {
	if f.WorkPhase == nil {
		return progress.PhaseTest, frozenDuration(m.JobTimeout)
	}
	return f.WorkPhase(m)
}

func (f *Flow) interruptions(m Manifest) (string, int) {
	if f.Interruptions == nil {
		return "", 0
	}
	return f.Interruptions(m)
}

func (f *Flow) outcome(err error, base receipt.Outcome) receipt.Outcome {
	if f.Outcome == nil {
		return base
	}
	return f.Outcome(err, base)
}

func (f *Flow) finish(ctx context.Context, s *Scope) {
	if f.Finish != nil {
		f.Finish(ctx, s)
	}
}

func (f *Flow) section(r *receipt.Receipt) {
	if f.Section != nil {
		f.Section(r)
	}
}

// frozenDuration reads a duration the manifest froze (0 when absent).
func frozenDuration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// Frozen is the run's spec as frozen (or, after --accept-config-change,
// as accepted): what is rented, at what price, under which budget, is
// read from it, never from the live config, once the run has been frozen.
func (e *Run) Frozen() Manifest { return e.manifest }

// workflow is the run's flow; a run begun or opened without one (exec,
// down) gets a plain one under its name.
func (e *Run) workflow() *Flow {
	if e.flow == nil {
		e.flow = plainFlow(e.Workflow)
	}
	return e.flow
}

// The frozen deadlines.
func (e *Run) readyDeadline() time.Duration { return frozenDuration(e.manifest.ReadyDeadline) }
func (e *Run) jobTimeout() time.Duration    { return frozenDuration(e.manifest.JobTimeout) }

// DefaultPullStall is timeouts.pull_stall's default.
const DefaultPullStall = 10 * time.Minute

// pullStall is how long a pull may show no progress before the rental is
// stopped and replaced.
func (e *Run) pullStall() time.Duration {
	if d := frozenDuration(e.manifest.PullStall); d > 0 {
		return d
	}
	return DefaultPullStall
}

// readyDeadlineFor is the ready deadline of a rental of o: the frozen one
// plus the pull of the run's image expected on o's host (its size over the
// host's download rate), so a large image on a slow host is given the time
// its pull needs.
func (e *Run) readyDeadlineFor(o provider.Offer) time.Duration {
	return e.readyDeadline() + policy.PullTime(o, e.manifest.ImageBytes)
}

// TeardownLimit is the frozen teardown deadline.
func (e *Run) TeardownLimit() time.Duration { return frozenDuration(e.manifest.TeardownLimit) }
