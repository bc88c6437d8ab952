package run

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

	"github.com/vastrun/vastrun/internal/ci"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/redact"
)

// Market is what the engine needs from the marketplace.
type Market interface {
	provider.OfferSearcher
	provider.InstanceCreator
	provider.InstanceReader
	provider.InstanceDestroyer
	AttachSSHKey(ctx context.Context, id provider.InstanceID, publicKey string) error
	Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error)
}

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
	CeilingDPH  float64  // a replacement for a taken offer is rented up to this $/h
	Bid         *BidPlan `json:",omitempty"` // interruptible rentals only (bid.go)
}

// Outcomes recorded in the journal and the receipt.
const (
	OutcomePassed        = "passed"
	OutcomeFailed        = "failed"
	OutcomeGated         = "gated"
	OutcomeSkipped       = "skipped"
	OutcomeNoOffer       = "no_offer"
	OutcomeNotApproved   = "not_approved"
	OutcomeReadyFailed   = "ready_failed"
	OutcomeVerifyFailed  = "verify_failed"
	OutcomeInterrupted   = "interrupted"
	OutcomeTimeout       = "timeout"
	OutcomeError         = "error"
	OutcomeUp            = "up"
	OutcomeDown          = "down"
	OutcomeBudget        = "budget_exceeded"
	OutcomeUntrusted     = "skipped_untrusted"
	OutcomeRemoteDiffers = "remote_bytes_differ"
)

// Engine runs the lifecycle for one run. Fill the fields, then call CI,
// Up, Exec or Down.
type Engine struct {
	Market   Market
	Clock    clock.Clock
	Log      *slog.Logger
	UI       Reporter
	Stream   io.Writer // live test output (redacted); nil discards
	CI       ci.Env
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
	// AgentBinary is the vastrun binary copied to training instances
	// (default: this executable).
	AgentBinary string
	// StorageEnv holds the storage settings and credentials (AWS_*
	// variables) given to the agent and the workload, and masked everywhere.
	StorageEnv map[string]string
	Simulated  bool
	Workflow   string
	// AcceptConfigChange lets a resumed run go on with a configuration that
	// differs from its frozen manifest (the change is journaled).
	AcceptConfigChange bool
	// JournalFault, when set, is installed on the run's journal (see
	// journal.Journal.SetWriteFault): tests use it to fill the disk.
	JournalFault func(journal.Record) error
	// SSHKeepAlive is how often SSH connections are probed for a stall
	// (0: remote's default; see remote.Dialer.KeepAlive).
	SSHKeepAlive time.Duration

	// Filled as the run proceeds.
	runDir     string
	j          *journal.Journal
	state      *State
	manifest   Manifest
	timings    timings
	test       *TestOutcome
	verifyRep  *verifyReport
	selected   []policy.Decision
	cost       costReport
	phaseTimes map[string]time.Time
	train      *TrainReport
	canary     *CanaryReport
	// journalErr is the first failed journal write; unjournaled holds what
	// happened but could not be written, applied to state in memory.
	journalErr  error
	unjournaled []journal.Record
	// beforeRent runs at the end of prepare (the canary's local contract).
	beforeRent func(ctx context.Context) error
}

func (e *Engine) mark(phase string) {
	if e.phaseTimes == nil {
		e.phaseTimes = map[string]time.Time{}
	}
	e.phaseTimes[phase] = e.now()
}

func (e *Engine) annotationWriter() io.Writer {
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
	Outcome  string
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

func (e *Engine) infof(format string, args ...any) {
	if e.UI != nil {
		e.UI.Infof(format, args...)
	}
}

func (e *Engine) now() time.Time { return e.Clock.Now() }

func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, e.Clock, d)
}

// jittered spreads d by ±20%.
func (e *Engine) jittered(d time.Duration) time.Duration {
	j := e.Jitter
	if j == nil {
		j = rand.Float64
	}
	return time.Duration(float64(d) * (0.8 + 0.4*j()))
}

// jitter is the jitter source for poll policies.
func (e *Engine) jitter() func() float64 {
	if e.Jitter == nil {
		return rand.Float64
	}
	return e.Jitter
}

// ErrJournal means a journal record could not be written (a full disk, a
// failing device). The step that needed it fails; intents that could not
// be written are not acted on; teardown still runs.
var ErrJournal = errors.New("the run's journal could not be written")

// record journals one record and updates the state from it. When the write
// fails, the error (wrapping ErrJournal) is returned to the step and kept
// for the outcome; what happened is still applied in memory so teardown
// and the receipt see it — except a failed intent, whose side effect the
// caller must not perform.
func (e *Engine) record(typ, step string, data any) error {
	if _, err := e.j.Append(typ, step, e.maskedData(data)); err != nil {
		jerr := fmt.Errorf("%w: %w", ErrJournal, err)
		if e.journalErr == nil {
			e.journalErr = jerr
		}
		if typ != "intent" || step == stepDestroy {
			b, _ := json.Marshal(e.maskedData(data))
			e.unjournaled = append(e.unjournaled, journal.Record{V: journal.Version, Time: e.now().UTC(), Type: typ, Step: step, Data: b})
			if recs, rerr := e.j.Records(); rerr == nil {
				if st, rerr := Replay(append(recs, e.unjournaled...)); rerr == nil {
					e.state = st
				}
			}
		}
		return jerr
	}
	recs, err := e.j.Records()
	if err != nil {
		return err
	}
	st, err := Replay(append(recs, e.unjournaled...))
	if err != nil {
		return err
	}
	e.state = st
	return writeStateFile(e.runDir, st, e.EvidenceDir)
}

// JournalErr is the first journal write that failed in this run, or nil.
func (e *Engine) JournalErr() error { return e.journalErr }

// RunDir is the run's state directory.
func (e *Engine) RunDir() string { return e.runDir }

// State is the run's replayed state.
func (e *Engine) State() *State { return e.state }

// Begin creates a new run (new run id and label) and opens its journal.
func (e *Engine) Begin(workflow string) error {
	now := e.now()
	runID := label.NewRunID(now)
	c := e.Config
	life := time.Duration(c.Timeouts.Ready)*2 + time.Duration(c.Timeouts.Job) + time.Duration(c.Timeouts.Teardown) + 30*time.Minute
	l, err := label.New(c.LabelPrefix, runID, now.Add(life))
	if err != nil {
		return err
	}
	e.Workflow = workflow
	e.runDir = filepath.Join(e.StateRoot, "runs", runID)
	e.defaultEvidence(runID)
	j, err := journal.Open(e.runDir, e.now)
	if err != nil {
		return err
	}
	if e.JournalFault != nil {
		j.SetWriteFault(e.JournalFault)
	}
	e.j = j
	if err := e.record("event", stepStart, startData{RunID: runID, Label: l.String(), Workflow: workflow}); err != nil {
		return err
	}
	// Scripts and the post step find the latest run here.
	_ = writeFileAtomic(filepath.Join(e.StateRoot, "current"), []byte(runID+"\n"), 0o600)
	return nil
}

// Open resumes an existing run by its directory.
func (e *Engine) Open(runDir string) error {
	j, err := journal.Open(runDir, e.now)
	if err != nil {
		return err
	}
	recs, err := j.Records()
	if err != nil {
		j.Close()
		return err
	}
	st, err := Replay(recs)
	if err != nil {
		j.Close()
		return err
	}
	if st.RunID == "" {
		j.Close()
		return fmt.Errorf("run directory %s holds no run", runDir)
	}
	if e.JournalFault != nil {
		j.SetWriteFault(e.JournalFault)
	}
	e.j, e.state, e.runDir = j, st, runDir
	e.defaultEvidence(st.RunID)
	return nil
}

func (e *Engine) defaultEvidence(runID string) {
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
func (e *Engine) Close() error {
	if e.j == nil {
		return nil
	}
	return e.j.Close()
}

// CurrentRunDir reads <stateRoot>/current.
func CurrentRunDir(stateRoot string) (string, error) {
	b, err := os.ReadFile(filepath.Join(stateRoot, "current"))
	if err != nil {
		return "", fmt.Errorf("no current run in %s (run 'vastrun up' first, or pass --instance/--label): %w", stateRoot, err)
	}
	return filepath.Join(stateRoot, "runs", strings.TrimSpace(string(b))), nil
}

// spec builds the run's manifest from the configuration.
func (e *Engine) spec(ctx context.Context) Manifest {
	c := e.Config
	var env []string
	for k := range c.Env {
		env = append(env, k)
	}
	m := Manifest{
		Schema: "vastrun.manifest/v1", RunID: e.state.RunID, Label: e.state.Label, Workflow: e.Workflow,
		Commit: gitCommit(ctx, e.RepoDir, e.CI.Commit), CIRun: e.CI.RunURL, Image: c.Image, Test: c.Test,
		Upload: c.Upload, Policy: c.Policy(), MaxSpendUSD: c.Budget.MaxSpend,
		ReadyDeadline: c.Timeouts.Ready.String(), JobTimeout: c.Timeouts.Job.String(), TeardownLimit: c.Timeouts.Teardown.String(),
		EvidenceDir: e.EvidenceDir, EnvNames: sortedCopy(env), SecretNames: sortedCopy(c.Secrets), CreatedAt: e.now().UTC(),
	}
	if e.Workflow == "train" {
		t := c.Train
		m.Test = ""
		m.Train = &TrainSpec{Command: t.Command, DatasetVersion: t.DatasetVersion, Seed: t.Seed, CheckpointDir: t.CheckpointDir,
			Cadence: t.Cadence, CheckpointURI: t.CheckpointURI, OutputDir: t.OutputDir, OutputURI: t.OutputURI, Keep: t.Keep,
			RuntimeDeadline: t.RuntimeDeadline.String(), HeartbeatTTL: t.HeartbeatTTL.String()}
	}
	return m
}

// freeze writes the manifest before anything is rented.
func (e *Engine) freeze(ctx context.Context) error {
	m := e.spec(ctx)
	hash, b, err := m.Hash()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return fmt.Errorf("create evidence directory: %w", err)
	}
	for _, p := range []string{filepath.Join(e.EvidenceDir, "manifest.json"), filepath.Join(e.runDir, "manifest.json")} {
		if err := writeFileAtomic(p, b, 0o644); err != nil {
			return fmt.Errorf("write manifest: %w", err)
		}
	}
	e.manifest = m
	return e.record("done", stepFreeze, map[string]any{"manifest_sha256": hash})
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// selectOffer searches and judges offers, excluding machines that failed.
func (e *Engine) selectOffer(ctx context.Context, exclude []int64) (*provider.Offer, error) {
	p := e.Config.Policy()
	p.ExcludeMachines = append(p.ExcludeMachines, exclude...)
	offers, err := e.Market.SearchOffers(ctx, p.LooseQuery(500))
	if err != nil {
		return nil, &StepError{Step: stepSelect, Err: err}
	}
	chosen, decisions := policy.Select(p, offers)
	e.selected = decisions
	writeSelection(e.EvidenceDir, decisions)
	if chosen == nil {
		if err := e.record("failed", stepSelect, map[string]any{"offers_seen": len(offers)}); err != nil {
			return nil, err
		}
		return nil, &StepError{Step: stepSelect, Outcome: OutcomeNoOffer, Err: fmt.Errorf("%w (%d offers seen; see selection.json in the evidence)", ErrNoOffer, len(offers))}
	}
	if err := e.record("done", stepSelect, map[string]any{"offer_id": chosen.ID, "machine_id": chosen.MachineID, "dph_total": policy.TotalDPH(*chosen, p.DiskGB)}); err != nil {
		return nil, err
	}
	return chosen, nil
}

// worstCase is the spend if the rental uses every deadline to the full.
// For training, the job is open-ended and the budget kill switch bounds it
// while it runs, so approval only needs to afford getting it started.
func (e *Engine) worstCase(dph float64) float64 {
	t := e.Config.Timeouts
	job := time.Duration(t.Job)
	if e.Workflow == "train" {
		job = 0
	}
	hours := (time.Duration(t.Ready) + job + time.Duration(t.Teardown)).Hours()
	return dph * hours
}

// spentSoFar estimates the spend of all attempts up to now.
func (e *Engine) spentSoFar() float64 {
	total := 0.0
	now := e.now()
	for _, a := range e.state.Attempts {
		if a.RentedAt.IsZero() {
			continue
		}
		end := now
		if !a.ConfirmedAt.IsZero() {
			end = a.ConfirmedAt
		}
		total += a.DPHTotal*end.Sub(a.RentedAt).Hours() - a.stoppedDiscount(end)
	}
	return total
}

func (e *Engine) approve(o provider.Offer, attempt int) error {
	p := e.Config.Policy()
	dph := p.Price(o)
	plan := Plan{Offer: o, TotalDPH: dph, DiskGB: p.DiskGB, MaxSpendUSD: e.Config.Budget.MaxSpend,
		WorstCase: e.worstCase(e.planDPH(o)), Label: e.state.Label, Image: e.Config.Image, Attempt: attempt, CeilingDPH: e.raceCeiling(dph), Bid: e.bidPlan(o)}
	if spent := e.spentSoFar(); spent+plan.WorstCase > plan.MaxSpendUSD {
		if err := e.record("failed", stepApprove, map[string]any{"worst_case_usd": plan.WorstCase, "spent_usd": spent}); err != nil {
			return err
		}
		return &StepError{Step: stepApprove, Outcome: OutcomeBudget, Err: fmt.Errorf(
			"worst case $%.4f (at $%.4f/h for ready %s + job %s + teardown %s) plus $%.4f spent exceeds budget.max_spend $%.2f: raise the budget or shorten the timeouts",
			plan.WorstCase, dph, e.Config.Timeouts.Ready, e.Config.Timeouts.Job, e.Config.Timeouts.Teardown, spent, plan.MaxSpendUSD)}
	}
	ok := false
	var err error
	if e.Approve != nil {
		ok, err = e.Approve(plan)
	}
	if err != nil {
		return err
	}
	if !ok {
		if err := e.record("failed", stepApprove, map[string]any{"offer_id": o.ID}); err != nil {
			return err
		}
		return &StepError{Step: stepApprove, Outcome: OutcomeNotApproved, Err: ErrNeedsApproval}
	}
	return e.record("done", stepApprove, map[string]any{"offer_id": o.ID, "dph_total": dph, "worst_case_usd": plan.WorstCase})
}
