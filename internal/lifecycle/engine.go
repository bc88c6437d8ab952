package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/spec"
)

// Reporter shows progress to people (stderr).
type Reporter interface {
	Infof(format string, args ...any)
}

// Plan is what the user approves before money moves.
type Plan struct {
	Offer       provider.Offer
	TotalDPH    float64
	DiskGB      float64
	MaxSpendUSD float64
	WorstCase   float64 // $ if every deadline is used to the full
	Label       string
	Image       string
	Attempt     int
	CeilingDPH  float64      // a replacement for a taken offer is rented up to this $/h
	Bid         *BidPlan     `json:",omitempty"` // interruptible rentals only (bid.go)
	DeadMan     *DeadManPlan `json:",omitempty"` // the instance's dead-man switch (deadman.go)
	// Pull is the image's expected pull on the offer's host, when the
	// image's size is known.
	Pull *PullPlan `json:",omitempty"`
}

// PullPlan is what the plan says of the image's pull.
type PullPlan struct {
	Bytes        int64
	InetDownMbps float64
	Expected     time.Duration // at the host's download rate
	// CostUSD is the pull's expected cost: while loading Vast bills the
	// storage, not the GPU (vast-api.md §3), so Expected at the storage's
	// $/h.
	CostUSD float64
	// ReadyDeadline is the rental's ready deadline: the frozen one plus
	// Expected.
	ReadyDeadline time.Duration
}

// Lines are the plan's lines about the pull.
func (p *PullPlan) Lines() []string {
	if p == nil {
		return nil
	}
	return []string{fmt.Sprintf("image %.2f GB pulls in about %s at the host's %.0f Mb/s (about $%.4f of storage while loading); ready deadline %s",
		float64(p.Bytes)/1e9, p.Expected.Round(time.Second), p.InetDownMbps, p.CostUSD, p.ReadyDeadline.Round(time.Second))}
}

// Outcomes recorded in the journal and the receipt (receipt.Outcome
// answers whether each succeeded and how it exits).
const (
	OutcomePassed        = receipt.Passed
	OutcomeFailed        = receipt.Failed
	OutcomeGated         = receipt.Gated
	OutcomeSkipped       = receipt.Skipped
	OutcomeNoOffer       = receipt.NoOffer
	OutcomeNotApproved   = receipt.NotApproved
	OutcomeReadyFailed   = receipt.ReadyFailed
	OutcomeVerifyFailed  = receipt.VerifyFailed
	OutcomeInterrupted   = receipt.Interrupted
	OutcomeTimeout       = receipt.Timeout
	OutcomeError         = receipt.Error
	OutcomeUp            = receipt.Up
	OutcomeDown          = receipt.Down
	OutcomeBudget        = receipt.Budget
	OutcomeUntrusted     = receipt.Untrusted
	OutcomeRemoteDiffers = receipt.RemoteDiffers
)

// Deps is the wiring of a run, built once by the CLI (or a test): the
// marketplace, the clock, where people and machines are told things, and
// the settings that are not part of the frozen spec. Steps read it; only
// the CLI writes it.
type Deps struct {
	Market   provider.Market
	Clock    clock.Clock
	Log      *slog.Logger
	UI       Reporter
	Stream   io.Writer // live test output (redacted); nil discards
	CI       cienv.Env
	Getenv   func(string) string
	Redactor *redact.Redactor
	HTTP     *http.Client // for alerts
	// Approve is asked before renting; nil means refuse.
	Approve func(Plan) (bool, error)
	// Annotations receives CI annotations (stderr by default).
	Annotations io.Writer
	Jitter      func() float64

	Config       *config.Config
	RepoDir      string // where gate commands and git run
	StateRoot    string // holds runs/<id>/
	EvidenceDir  string // exact evidence directory; default <EvidenceRoot>/<run>
	EvidenceRoot string // default vastrun-evidence
	Base         string // git base for paths; "" means detect
	// APIURL is the marketplace URL the on-instance agent uses for its
	// dead-man switch (with the instance's own CONTAINER_API_KEY).
	APIURL string
	// AgentBinary is the vastrun binary copied to every instance as its
	// agent: the dead-man switch, and training's supervisor (default: this
	// executable).
	AgentBinary string
	// Switch arms and beats the instances' dead-man switch (deadman.go);
	// nil is the real one, AgentBinary on the instance.
	Switch Switch
	// StorageEnv holds the storage settings and credentials (AWS_*
	// variables) given to the agent and the workload, and masked everywhere.
	StorageEnv map[string]string
	Simulated  bool
	// SimInstance says where a simulated instance's commands ran (see
	// sim.InstanceRuntime); it goes into every receipt of a simulated run.
	SimInstance string
	Workflow    string
	// AcceptConfigChange lets a resumed run go on with a configuration that
	// differs from its frozen manifest (the change is journaled).
	AcceptConfigChange bool
	// JournalFault, when set, is installed on the run's journal (see
	// journal.Journal.SetWriteFault): tests use it to fill the disk.
	JournalFault func(journal.Record) error
	// JournalHook, when set, is asked for a mirror as the run's journal
	// opens (Begin and Open); each record goes to the mirror first (see
	// journal.Journal.SetMirror). Team state on S3 hooks in here.
	JournalHook func(runID, runDir string) (func(journal.Record) error, error)
	// SSHKeepAlive is how often SSH connections are probed for a stall
	// (0: remote's default; see remote.Dialer.KeepAlive).
	SSHKeepAlive time.Duration
	// Observer, when set, is told of every phase change (live progress).
	Observer progress.Observer
	// PreferOffer, when set, is chosen over cheaper offers while it is
	// eligible, and PlanSHA256 names the saved plan the run applies
	// (journaled with the approval, and in the receipt): see propose.go.
	PreferOffer provider.OfferID
	PlanSHA256  string
	// Notify, when set, is the run's webhook for its events (notify.go).
	Notify *Notifications
	// ImageSize, when set, reads an image's compressed size from its
	// registry (image.CompressedSize; the simulator's own under --sim). The
	// freeze asks it once: a run whose image size is known gets ready
	// deadlines that count each host's pull (readyDeadlineFor).
	ImageSize func(ctx context.Context, ref string) (int64, error)
}

// Run is one run: its journal, the state replayed from it, its frozen spec
// and the facts its receipt reports, gathered as steps run. Every record
// goes through Record, which journals before it applies.
type Run struct {
	*Deps
	// readyFor is the ready deadline of the rental being made (its host's
	// pull counted), for the live progress.
	readyFor   time.Duration
	runDir     string
	j          *journal.Journal
	state      *runstate.State
	manifest   Manifest
	timings    timings
	verifyRep  *receipt.VerifyReport
	selected   []policy.Decision
	cost       receipt.Cost
	phaseTimes map[string]time.Time
	// journalErr is the first failed journal write; unjournaled holds what
	// happened but could not be written, applied to state in memory.
	journalErr  error
	unjournaled []journal.Record
	evidenceUp  *receipt.EvidenceUpload // the copy at evidence.uri (evidence.go)
	// cleanupWarnings are what the teardown could not check although
	// nothing it knew of is left (teardown.go); the receipt lists them.
	cleanupWarnings []string
	labelCleanAt    time.Time // the last complete, clean listing of the label
	// flow is the run's workflow: its steps and what it adds to the
	// shared ones.
	flow *Flow
	// opened: the run was replayed by Open, so Execute continues it.
	opened    bool
	lastEvent progress.Event
	sw        switches // the dead-man switches armed by this controller (deadman.go)
}

// Scope is what a step works with: the run and its wiring, and the
// instance the provision step connected to (zero before it, and again
// after the connection is closed).
type Scope struct {
	*Run
	Inst provider.Instance
	Conn *remote.Client
	// uploadTo, when set, stands in for Conn in the upload step (the step
	// tables' fake; see uploader).
	uploadTo uploader
}

func (e *Run) Mark(phase string) {
	if e.phaseTimes == nil {
		e.phaseTimes = map[string]time.Time{}
	}
	e.phaseTimes[phase] = e.Now()
}

func (e *Deps) annotationWriter() io.Writer {
	if e.Annotations != nil {
		return e.Annotations
	}
	return os.Stderr
}

// ErrNeedsApproval means renting needs --yes or an interactive yes.
var ErrNeedsApproval = errors.New("renting needs approval: pass --yes, or run at a terminal and answer yes")

// ErrNoOffer means no offer met the policy.
var ErrNoOffer = errors.New("no offer matches the GPU policy")

// ErrGated means the CPU gate failed, so nothing was rented.
var ErrGated = errors.New("gate failed: nothing was rented")

// StepError is a classified failure of one step on one instance.
type StepError struct {
	Step     string
	Instance provider.InstanceID
	Outcome  receipt.Outcome
	Err      error
}

func (e *StepError) Error() string {
	if e.Instance != 0 {
		return fmt.Sprintf("%s instance %d: %v", e.Step, e.Instance, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Step, e.Err)
}
func (e *StepError) Unwrap() error { return e.Err }

// TestFailedError means the test ran and exited non-zero.
type TestFailedError struct{ Code int }

func (e *TestFailedError) Error() string {
	return fmt.Sprintf("the GPU test failed (exit status %d)", e.Code)
}

// CleanupError means destruction of some instances was not confirmed.
type CleanupError struct {
	Label     string
	Instances []provider.InstanceID
	Err       error
}

func (e *CleanupError) Error() string {
	return fmt.Sprintf("cleanup NOT confirmed for instances %v (label %s): they may still be billing: %v", e.Instances, e.Label, e.Err)
}
func (e *CleanupError) Unwrap() error { return e.Err }

func (e *Deps) Infof(format string, args ...any) {
	if e.UI != nil {
		e.UI.Infof(format, args...)
	}
}

func (e *Deps) Now() time.Time { return e.Clock.Now() }

func (e *Deps) Sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, e.Clock, d)
}

// jittered spreads d by ±20%.
func (e *Deps) Jittered(d time.Duration) time.Duration {
	j := e.Jitter
	if j == nil {
		j = rand.Float64
	}
	return time.Duration(float64(d) * (0.8 + 0.4*j()))
}

// jitter is the jitter source for poll policies.
func (e *Deps) jitter() func() float64 {
	if e.Jitter == nil {
		return rand.Float64
	}
	return e.Jitter
}

// ErrJournal means a journal record could not be written (a full disk, a
// failing device). The step that needed it fails; intents that could not
// be written are not acted on; teardown still runs.
var ErrJournal = errors.New("the run's journal could not be written")

// record journals one record and applies it to the state (State.Apply):
// the journal is never re-read per append. When the write fails, the error
// (wrapping ErrJournal) is returned to the step and kept for the outcome;
// what happened is still applied in memory so teardown and the receipt see
// it — except a failed intent, whose side effect the caller must not
// perform.
func (e *Run) Record(typ, step string, data any) error {
	defer e.observeRecord(typ, step, data)
	defer e.Notify.record(e, typ, step, data)
	if e.state == nil {
		e.state = &runstate.State{}
	}
	rec, err := e.j.Append(typ, step, e.maskedData(data))
	if err != nil {
		jerr := fmt.Errorf("%w: %w", ErrJournal, err)
		if e.journalErr == nil {
			e.journalErr = jerr
		}
		if typ != "intent" || step == stepDestroy {
			b, _ := json.Marshal(e.maskedData(data))
			rec := journal.Record{V: journal.Version, Time: e.Now().UTC(), Type: typ, Step: step, Data: b}
			e.unjournaled = append(e.unjournaled, rec)
			_ = e.state.Apply(rec) // our own encoding: it decodes
		}
		return jerr
	}
	if err := e.state.Apply(rec); err != nil {
		return err
	}
	return e.writeStateFile(e.runDir, e.state, e.EvidenceDir)
}

// condition journals step's condition from how it ended: True when err is
// nil, otherwise False with the error's outcome class as the reason.
func (e *Run) condition(step string, inst provider.InstanceID, err error) error {
	c := runstate.Condition{Status: runstate.ConditionTrue, Reason: "Done", Instance: inst}
	if err != nil {
		c = runstate.Condition{Status: runstate.ConditionFalse, Reason: string(Outcome(err)), Message: err.Error(), Instance: inst}
	}
	return e.Record(runstate.RecCondition, step, c)
}

// journalCondition journals step's condition from err and returns err, or
// the journal's error when the step succeeded but its condition could not
// be written (a run never goes on past a step it could not record).
func (e *Run) journalCondition(step string, inst provider.InstanceID, err error) error {
	if errors.Is(err, ErrJournal) {
		return err
	}
	if cerr := e.condition(step, inst, err); cerr != nil {
		if err == nil {
			return cerr
		}
		return errors.Join(err, cerr)
	}
	return err
}

// reconcileStep runs one step unless its journaled condition is already
// True (for inst, when inst is not 0): steps are idempotent, and a resumed
// run walks the same list. The step's condition is journaled before
// returning; a condition that cannot be journaled fails the step.
func (e *Run) reconcileStep(step string, inst provider.InstanceID, fn func() error) error {
	if c := e.state.Condition(step); c.IsTrue() && (inst == 0 || c.Instance == inst) {
		return nil
	}
	return e.journalCondition(step, inst, fn())
}

// JournalErr is the first journal write that failed in this run, or nil.
func (e *Run) JournalErr() error { return e.journalErr }

// RunDir is the run's state directory.
func (e *Run) RunDir() string { return e.runDir }

// State is the run's replayed state.
func (e *Run) State() *runstate.State { return e.state }

// Begin creates a new run (new run id and label) and opens its journal.
func (e *Scope) Begin(workflow string) error {
	now := e.Now()
	runID := label.NewRunID(now)
	c := e.Config
	life := time.Duration(c.Timeouts.Ready)*2 + time.Duration(c.Timeouts.Job) + time.Duration(c.Timeouts.Teardown) + 30*time.Minute
	l, err := label.New(c.LabelPrefix, runID, now.Add(life))
	if err != nil {
		return err
	}
	if e.flow == nil || e.flow.Name != workflow {
		e.flow = plainFlow(workflow)
	}
	e.Workflow = workflow
	e.runDir = filepath.Join(e.StateRoot, "runs", runID)
	e.defaultEvidence(runID)
	j, err := journal.Open(e.runDir, e.Now)
	if err != nil {
		return err
	}
	if e.JournalFault != nil {
		j.SetWriteFault(e.JournalFault)
	}
	if err := e.hookJournal(j, runID); err != nil {
		return err
	}
	e.j, e.state = j, &runstate.State{}
	// The draft spec holds every step input from here on; freeze hashes it.
	e.manifest = draft(context.Background(), e, runID, l.String())
	if err := e.Record("event", stepStart, runstate.StartData{RunID: runID, Label: l.String(), Workflow: workflow}); err != nil {
		return err
	}
	// Scripts and the post step find the latest run here.
	_ = e.writeFileAtomic(filepath.Join(e.StateRoot, "current"), []byte(runID+"\n"), 0o600)
	return nil
}

// Open resumes an existing run by its directory.
func (e *Scope) Open(runDir string) error {
	j, err := journal.Open(runDir, e.Now)
	if err != nil {
		return err
	}
	recs, err := j.Records()
	if err != nil {
		_ = j.Close() // only read: Close releases the lock, with nothing to lose; the read's error is the one to report
		return err
	}
	st, err := runstate.Replay(recs)
	if err != nil {
		_ = j.Close() // only read, as above; the replay's error is the one to report
		return err
	}
	if st.RunID == "" {
		_ = j.Close() // only read, as above; that it holds no run is the error to report
		return fmt.Errorf("run directory %s holds no run", runDir)
	}
	if e.JournalFault != nil {
		j.SetWriteFault(e.JournalFault)
	}
	e.runDir = runDir
	if err := e.hookJournal(j, st.RunID); err != nil {
		return err
	}
	e.j, e.state, e.opened = j, st, true
	e.defaultEvidence(st.RunID)
	// exec and down on an opened run read its frozen spec; a run frozen
	// before, whose manifest cannot be read, still gets torn down, from the
	// configuration's draft (resume checks the manifest: adoptFrozen).
	if m, err := LoadManifest(runDir, st.ManifestHash); err == nil {
		e.manifest = m
	} else {
		e.manifest = draft(context.Background(), e, st.RunID, st.Label)
	}
	return nil
}

func (e *Run) hookJournal(j *journal.Journal, runID string) error {
	j.SetRedactor(e.Redactor) // before the mirror or the file sees a record
	if e.JournalHook == nil {
		return nil
	}
	m, err := e.JournalHook(runID, e.runDir)
	if err != nil {
		_ = j.Close() // nothing was appended through the hook yet; the hook's error is the one to report
		return err
	}
	j.SetMirror(m)
	return nil
}

func (e *Run) defaultEvidence(runID string) {
	if e.EvidenceDir != "" {
		return
	}
	root := e.EvidenceRoot
	if root == "" {
		root = "vastrun-evidence"
	}
	e.EvidenceDir = filepath.Join(root, runID)
}

// Close releases the journal.
func (e *Run) Close() error {
	if e.j == nil {
		return nil
	}
	return e.j.Close()
}

// CurrentRunDir reads <stateRoot>/current.
func CurrentRunDir(stateRoot string) (string, error) {
	b, err := os.ReadFile(filepath.Join(stateRoot, "current"))
	if err != nil {
		return "", fmt.Errorf("the current run of %s: %w", stateRoot, err)
	}
	return filepath.Join(stateRoot, "runs", strings.TrimSpace(string(b))), nil
}

// draft builds the run's spec from the configuration (spec.Build), with
// the workflow's own sections: the one place the engine reads the
// config's step inputs. Every step reads e.Frozen().
func draft(ctx context.Context, e *Scope, runID, lbl string) Manifest {
	m := spec.Build(e.Config, spec.Facts{RunID: runID, Label: lbl, Workflow: e.Workflow,
		Commit: gitCommit(ctx, e.RepoDir, e.CI.Commit), CIRun: e.CI.RunURL,
		EvidenceDir: e.EvidenceDir, EvidenceURI: evidenceBase(e), CreatedAt: e.Now().UTC()})
	e.workflow().spec(&m)
	return m
}

// freeze writes the manifest before anything is rented.
func freeze(ctx context.Context, e *Scope) error {
	m := e.manifest
	m.CreatedAt = e.Now().UTC()
	learnImageSize(ctx, e, &m)
	hash, b, err := m.Hash()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return fmt.Errorf("create evidence directory: %w", err)
	}
	for _, p := range []string{filepath.Join(e.EvidenceDir, "manifest.json"), filepath.Join(e.runDir, "manifest.json")} {
		if err := e.writeFileAtomic(p, b, 0o644); err != nil {
			return fmt.Errorf("write manifest: %w", err)
		}
	}
	e.manifest = m
	return e.Record("done", stepFreeze, map[string]any{"manifest_sha256": hash})
}

// selectOffer searches and judges offers, excluding machines that failed.
func selectOffer(ctx context.Context, e *Scope, exclude []int64) (*provider.Offer, error) {
	p := e.Frozen().Policy
	p.ExcludeMachines = append(append([]int64(nil), p.ExcludeMachines...), exclude...) // never into the manifest's array
	offers, err := e.Market.SearchOffers(ctx, p.LooseQuery(500))
	if err != nil {
		return nil, &StepError{Step: stepSelect, Err: err}
	}
	chosen, decisions := policy.Select(p, offers)
	chosen = preferOffer(chosen, decisions, e.PreferOffer)
	e.selected = decisions
	e.writeSelection(e.EvidenceDir, decisions)
	if chosen == nil {
		if err := e.Record("failed", stepSelect, map[string]any{"offers_seen": len(offers)}); err != nil {
			return nil, err
		}
		return nil, &StepError{Step: stepSelect, Outcome: OutcomeNoOffer, Err: fmt.Errorf("%w (%d offers seen; see selection.json in the evidence)", ErrNoOffer, len(offers))}
	}
	if err := e.Record("done", stepSelect, map[string]any{"offer_id": chosen.ID, "machine_id": chosen.MachineID, "dph_total": policy.TotalDPH(*chosen, p.DiskGB)}); err != nil {
		return nil, err
	}
	return chosen, nil
}

// worstCase is the spend if the rental uses every deadline to the full, as
// the frozen manifest sets them; how much of the job counts is the
// workflow's (training's is open-ended and bounded while it runs).
func worstCase(e *Scope, dph float64, o provider.Offer) float64 {
	m := e.manifest
	hours := (e.readyDeadlineFor(o) + e.workflow().jobBound(m) + frozenDuration(m.TeardownLimit)).Hours()
	return dph * hours
}

// pullPlan is the plan's view of the image's pull on o's host; nil when
// the image's size is unknown.
func pullPlan(e *Scope, o provider.Offer) *PullPlan {
	m := e.manifest
	d := policy.PullTime(o, m.ImageBytes)
	if d <= 0 {
		return nil
	}
	return &PullPlan{Bytes: m.ImageBytes, InetDownMbps: o.InetDownMbps, Expected: d,
		CostUSD: policy.StorageDPH(o, m.Policy.DiskGB) * d.Hours(), ReadyDeadline: e.readyDeadlineFor(o)}
}

// imageSizeWait bounds the freeze's registry read of the image's size.
const imageSizeWait = 15 * time.Second

// learnImageSize asks the registry for the image's compressed size once,
// at the freeze; a registry that cannot say leaves it unknown (0), and
// the ready deadline is then the configured one.
func learnImageSize(ctx context.Context, e *Scope, m *Manifest) {
	if e.ImageSize == nil || m.ImageBytes > 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, imageSizeWait)
	n, err := e.ImageSize(lctx, m.Image)
	cancel()
	if err != nil {
		e.Infof("the image's size could not be read from its registry (%v): the ready deadline does not count its pull", err)
		return
	}
	m.ImageBytes = n
	m.Derive()
}

// spentSoFar estimates the spend of all attempts up to now.
func (e *Run) SpentSoFar() float64 {
	total := 0.0
	now := e.Now()
	for _, a := range e.state.Attempts {
		if a.RentedAt.IsZero() {
			continue
		}
		end := now
		if !a.ConfirmedAt.IsZero() {
			end = a.ConfirmedAt
		}
		total += a.DPHTotal*end.Sub(a.RentedAt).Hours() - a.StoppedDiscount(end)
	}
	return total
}

func approve(e *Scope, o provider.Offer, attempt int) error {
	m := e.Frozen()
	p := m.Policy
	dph := p.Price(o) // the bid + storage for an interruptible rental (bid.go)
	plan := Plan{Offer: o, TotalDPH: dph, DiskGB: p.DiskGB, MaxSpendUSD: m.MaxSpendUSD,
		WorstCase: worstCase(e, planDPH(e, o), o), Label: e.state.Label, Image: m.Image, Attempt: attempt, CeilingDPH: raceCeiling(e, dph), Bid: bidPlan(e, o), DeadMan: deadManPlan(e),
		Pull: pullPlan(e, o)}
	if spent := e.SpentSoFar(); spent+plan.WorstCase > plan.MaxSpendUSD {
		if err := e.Record("failed", stepApprove, map[string]any{"worst_case_usd": plan.WorstCase, "spent_usd": spent}); err != nil {
			return err
		}
		return &StepError{Step: stepApprove, Outcome: OutcomeBudget, Err: fmt.Errorf(
			"worst case $%.4f (at $%.4f/h for ready %s + job %s + teardown %s) plus $%.4f spent exceeds budget.max_spend $%.2f: raise the budget or shorten the timeouts",
			plan.WorstCase, dph, e.readyDeadlineFor(o), spec.ParseDuration(m.JobTimeout), spec.ParseDuration(m.TeardownLimit), spent, plan.MaxSpendUSD)}
	}
	ok := false
	var err error
	if e.Approve != nil {
		ok, err = e.Approve(plan)
	}
	if errors.Is(err, ErrDeclined) { // a no at the prompt: a choice, not a failure
		if jerr := e.Record("failed", stepApprove, map[string]any{"offer_id": o.ID, "declined": true}); jerr != nil {
			return jerr
		}
		return &StepError{Step: stepApprove, Outcome: OutcomeCancelled, Err: ErrDeclined}
	}
	if err != nil {
		return err
	}
	if !ok {
		if err := e.Record("failed", stepApprove, map[string]any{"offer_id": o.ID}); err != nil {
			return err
		}
		return &StepError{Step: stepApprove, Outcome: OutcomeNotApproved, Err: ErrNeedsApproval}
	}
	done := map[string]any{"offer_id": o.ID, "dph_total": dph, "worst_case_usd": plan.WorstCase}
	if e.PlanSHA256 != "" {
		done["plan_sha256"] = e.PlanSHA256
	}
	return e.Record("done", stepApprove, done)
}

// New starts a run's scope on its wiring; Begin or Open then gives it a
// run.
func New(d *Deps) *Scope { return &Scope{Run: &Run{Deps: d}} }
