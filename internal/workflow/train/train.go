package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/storage"
)

// Training contract with the workload (docs/train.md):
//
//	VASTRUN_CHECKPOINT_DIR    write checkpoint STEP into $VASTRUN_CHECKPOINT_DIR/STEP/,
//	                          then create the file .complete in it
//	VASTRUN_CHECKPOINT_EVERY  the cadence, in steps
//	VASTRUN_RESUME_STEP       set when resuming: the restored checkpoint's step
//	VASTRUN_RESUME_DIR        where that checkpoint was restored
//	VASTRUN_RESUME_PROOF      write the step you resumed from here (proof of resume)
//	VASTRUN_OUTPUT_DIR        final outputs, uploaded with checksums at the end
//	VASTRUN_RESULT            a JSON object with final metrics (e.g. the loss)
//	VASTRUN_SEED, VASTRUN_DATASET_VERSION
//
// The agent makes every path variable absolute (anchored at the login
// directory, which it also exports as VASTRUN_HOME) before it starts the
// workload, so a command that changes directory still finds them.
const (
	remoteBin    = agent.Binary
	minTrainPoll = time.Second
	logChunk     = 256 << 10 // the most of the workload's log one poll brings back
)

// trainEnd is how one attempt's monitoring ended.
type trainEnd struct {
	interrupted string // non-empty: the instance failed under the workload
	exitCode    *int   // the workload finished
	outbid      bool   // an interruptible rental was outbid (outbid.go)

	// Within trainOn's monitor only: the pass started the workload, so the
	// next pass comes without the limit checks; cur is the instance as the
	// API showed it to this pass.
	again bool
	cur   provider.Instance
}

// Run runs a checkpointed training run to completion on e (its wiring
// filled), replacing interrupted instances and resuming from the last
// committed checkpoint.
func Run(ctx context.Context, e *lifecycle.Scope) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, e, newFlow(e).Flow())
}

// NewFlow is training's flow on e, for a run driven by something else
// than Run (a saved plan: lifecycle.Propose).
func NewFlow(e *lifecycle.Scope) lifecycle.Flow { return newFlow(e).Flow() }

// Resume continues a run whose controller died, from its journal (e
// opened with Open), re-attaching to a live instance instead of renting.
// A configuration that differs from the run's frozen manifest is refused
// before anything is touched (see lifecycle.Scope.AcceptConfigChange).
func Resume(ctx context.Context, e *lifecycle.Scope) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, e, newFlow(e).Flow())
}

// drive is training's work, after prepare: attach (or rent), train and
// monitor, and on an interruption replace the instance, until the
// workload ends or a limit stops it.
func (e *flow) drive(ctx context.Context) (err error) {
	var client *remote.Client
	defer func() {
		if client != nil {
			_ = client.Close() // always nil: it only drops the SSH connection, and teardown destroys the instance whatever it did
		}
	}()
	e.ensureReport()
	for k, v := range e.s.StorageEnv {
		if strings.Contains(k, "SECRET") || strings.Contains(k, "TOKEN") || strings.Contains(k, "KEY_ID") {
			e.s.Redactor.Add(v)
		}
	}
	// The secrets are masked from the start, also when this controller
	// re-attaches and never builds the workload's environment itself.
	e.trainEnv(-1)
	started := e.s.State().Started
	deadline := started.Add(e.trainSpec().Runtime())
	var exclude []int64
	for _, a := range e.s.State().Attempts {
		if a.Failure != "" {
			exclude = append(exclude, a.MachineID)
		}
	}
	reconnects := 0
	afterStop := false // the instance ran again after an outbid (outbid.go)
	for attempts := 0; ; attempts++ {
		var inst provider.Instance
		var err error
		client, inst, err = e.s.Attach(ctx, exclude)
		if err == nil {
			e.resumesReplaced(inst.ID)
		}
		var end trainEnd
		switch {
		case errors.Is(err, lifecycle.ErrNoAnswer) && ctx.Err() == nil && inst.ID != 0:
			// The verify probe got no answer (preempted while verifying, or
			// SSH down past the ready deadline): an interruption, replaced
			// below, not a verdict on the instance.
			end, err = trainEnd{interrupted: err.Error()}, nil
			if e.outbidNow(ctx, inst.ID) {
				end = trainEnd{interrupted: "outbid", outbid: true}
			}
		case err != nil:
			return err
		default:
			if afterStop {
				afterStop = false
				if err := e.retireLost(ctx, client, inst.ID); err != nil {
					e.s.Infof("could not clear the stopped workload on instance %d: %v", inst.ID, err)
				}
			}
			end, err = e.trainOn(ctx, client, inst, deadline)
			_ = client.Close() // always nil: it only drops the SSH connection; the next attach dials afresh
			client = nil
		}
		// SSH lost for good mid-step: look at the instance again (attach
		// re-attaches if it runs, replaces it if not) instead of failing.
		// An outbid also breaks SSH: when the connection was lost because
		// the host stopped a bid instance, it is an outbid, not a resume.
		if err != nil && remote.Lost(err) && ctx.Err() == nil && e.outbidNow(ctx, inst.ID) {
			end, err = trainEnd{interrupted: "outbid", outbid: true}, nil
		}
		if err != nil && remote.Lost(err) && ctx.Err() == nil && reconnects < 3 {
			reconnects++
			attempts--
			e.s.Infof("SSH to instance %d lost (%v); checking the instance again", inst.ID, err)
			continue
		}
		if err != nil {
			return err
		}
		if end.exitCode != nil {
			e.report.ExitCode = end.exitCode
			if *end.exitCode != 0 {
				return fmt.Errorf("%w (exit status %d; see train.log)", ErrTrainFailed, *end.exitCode)
			}
			e.s.Infof("training finished")
			return nil
		}
		e.resumesInterrupted(inst.ID, end.interrupted)
		if end.outbid {
			resumed, err := e.onOutbid(ctx, inst, deadline)
			if err != nil {
				return err
			}
			if resumed { // the same rental again: no replacement
				attempts--
				afterStop = true
				continue
			}
		}
		// Interrupted: destroy it (confirmed), exclude its machine, replace.
		t0 := e.s.Now()
		if err := e.s.Record("event", lifecycle.StepFailover, runstate.InstanceData{Instance: inst.ID, Reason: end.interrupted}); err != nil {
			return err // teardown destroys it
		}
		e.s.Infof("instance %d interrupted (%s): destroying it and renting a replacement", inst.ID, end.interrupted)
		if err := e.s.DestroyConfirm(context.WithoutCancel(ctx), inst.ID, time.Time{}); err != nil {
			return err
		}
		e.s.AddTiming("interruption_to_replacement_requested", e.s.Now().Sub(t0))
		exclude = append(exclude, inst.MachineID)
		if attempts+1 >= e.trainSpec().MaxAttempts {
			return &lifecycle.StepError{Step: "train", Outcome: lifecycle.OutcomeReadyFailed, Err: fmt.Errorf("interrupted %d times; giving up (train.max_attempts)", attempts+1)}
		}
	}
}

// resumesReplaced marks as interrupted the unreported resumes on every
// instance but cur: attach replaced them (one lost while no controller
// watched it, found gone by a resumed controller), so their workload can
// report nothing any more.
func (e *flow) resumesReplaced(cur provider.InstanceID) {
	for i := range e.report.Resumes {
		if r := &e.report.Resumes[i]; r.Instance != cur {
			e.resumesInterrupted(r.Instance, "replaced")
		}
	}
}

// resumesInterrupted marks the resumes on inst that the workload had not
// reported when the instance was interrupted: not proven, and not shown
// wrong either (a restore followed closely by a preemption or an outbid,
// which a slow start on a busy machine makes likelier).
func (e *flow) resumesInterrupted(inst provider.InstanceID, why string) {
	for i := range e.report.Resumes {
		if r := &e.report.Resumes[i]; r.Instance == inst && r.ReportedStep == nil && !r.Proven && r.Restored != receipt.RestoredNone && r.Interrupted == "" {
			r.Interrupted = why
		}
	}
}

func (e *flow) trainEnv(restored int64) map[string]string {
	t := e.trainSpec()
	env := map[string]string{}
	for k, v := range e.s.Frozen().Env {
		env[k] = v
	}
	for k, v := range e.s.StorageEnv {
		env[k] = v
	}
	for _, name := range e.s.Frozen().SecretNames {
		if v := e.s.Getenv(name); v != "" {
			env[name] = v
			e.s.Redactor.Add(v)
		}
	}
	env["VASTRUN_RUN_ID"] = e.s.State().RunID
	env["VASTRUN_CHECKPOINT_DIR"] = t.CheckpointDir
	env["VASTRUN_CHECKPOINT_EVERY"] = strconv.Itoa(t.Cadence)
	env["VASTRUN_OUTPUT_DIR"] = t.OutputDir
	if t.Seed != nil { // a seed the config does not set is not invented
		env["VASTRUN_SEED"] = strconv.FormatInt(*t.Seed, 10)
	}
	if t.DatasetVersion != "" {
		env["VASTRUN_DATASET_VERSION"] = t.DatasetVersion
	}
	env["VASTRUN_RESUME_PROOF"] = agent.ProofFile
	env["VASTRUN_RESULT"] = lifecycle.ResultPath
	if t.CheckpointFile != "" {
		env["VASTRUN_CHECKPOINT_FILE"] = t.CheckpointFile
	}
	if restored >= 0 {
		env["VASTRUN_RESUME_STEP"] = strconv.FormatInt(restored, 10)
		env["VASTRUN_RESUME_DIR"] = agent.ResumeDir
	}
	env["VASTRUN_API_URL"] = e.s.APIURL
	return env
}

// ErrAgentProtocol wraps an answer from the agent this controller cannot
// act on (another schema version, a malformed document): never read as a
// "no", it ends the run.
var ErrAgentProtocol = errors.New("agent protocol")

// errAgentMissing: the agent binary is not on the instance (yet).
var errAgentMissing = errors.New("the vastrun agent is not on the instance")

// agentPresent asks, by exit status, whether the agent binary is there.
func (e *flow) agentPresent(ctx context.Context, c *remote.Client) error {
	err := c.Run(ctx, remote.Command{Script: `[ -x ` + remoteBin + ` ]`})
	var ee *remote.ExitError
	if errors.As(err, &ee) && ee.Code == 1 && ee.Signal == "" {
		return errAgentMissing
	}
	return err
}

// agentOn is the typed agent client for inst over c. Its errors name the
// op and the instance; stderr it quotes is redacted.
func (e *flow) agentOn(c *remote.Client, inst provider.InstanceID) *agent.Client {
	return &agent.Client{R: c, Bin: remoteBin, Instance: fmt.Sprintf("instance %d", inst), Redact: e.s.Redactor.String}
}

// agentErr marks an answer this controller cannot act on (another
// protocol, a request the agent refuses as malformed) as ErrAgentProtocol.
func agentErr(err error) error {
	if errors.Is(err, agent.ErrSchema) || errors.Is(err, agent.ErrRequest) {
		return fmt.Errorf("%w: %w", ErrAgentProtocol, err)
	}
	return err
}

// askAgent is one status request: it brings back the log from offset
// (the heartbeat has its own channel: lifecycle.Scope.KeepAlive).
func (e *flow) askAgent(ctx context.Context, c *remote.Client, inst provider.InstanceID, offset int64) (agent.Report, error) {
	r, err := e.agentOn(c, inst).Status(ctx, agent.StatusRequest{LogOffset: offset, LogMax: logChunk})
	return r, agentErr(err)
}

// attemptLog collects one attempt's train.log into the evidence as it is
// written, so an attempt whose instance vanishes still leaves its log.
type attemptLog struct {
	path   string
	offset int64
	// metrics is how much of the instance's metrics file is collected.
	metrics int64
	// skipMetrics: lines of the instance's metrics file the evidence already
	// holds from this attempt (a re-attached controller reads from 0).
	skipMetrics int
	// attempt is the attempt (1-based) whose instance this log collects.
	attempt int
	// mask masks the chunks as one stream into masked, holding back a line
	// that may begin a secret wrapped over lines until the next chunk.
	mask   io.Writer
	masked bytes.Buffer
}

func (e *flow) newAttemptLog() *attemptLog {
	return e.attemptLogFor(max(len(e.s.State().Attempts), 1))
}

// attemptLogFor is the log collection of attempt n (1-based).
func (e *flow) attemptLogFor(n int) *attemptLog {
	p := filepath.Join(e.s.EvidenceDir, fmt.Sprintf("train.attempt-%d.log", n))
	// Truncated: a re-attached controller reads the remote log again from its
	// start. Created now, so every attempt has its log in the evidence, with
	// what the polls brought back before any interruption. An evidence file
	// that cannot be created is said; training goes on without it.
	if err := createEvidence(e.s, p); err != nil {
		e.s.Infof("could not create %s in the evidence (training goes on without it): %v", filepath.Base(p), err)
	}
	return &attemptLog{path: p, attempt: n, skipMetrics: recordedMetrics(e.s.EvidenceDir, n)}
}

// createEvidence creates (or truncates) the empty evidence file p.
func createEvidence(s *lifecycle.Scope, p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := s.Sink().Create(p, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// add appends a chunk up to its last newline (a secret is masked whole,
// never split across two chunks), unless the chunk is full and has none.
func (l *attemptLog) add(s *lifecycle.Scope, ch agent.LogChunk) {
	if ch.Offset != l.offset || len(ch.Data) == 0 {
		return
	}
	data := ch.Data
	if i := strings.LastIndexByte(string(data), '\n'); i >= 0 {
		data = data[:i+1]
	} else if len(data) < logChunk {
		return
	}
	if l.mask == nil {
		l.mask = s.Redactor.Writer(&l.masked)
	}
	l.mask.Write(data) //nolint:errcheck // into a bytes.Buffer, which cannot fail
	l.offset += int64(len(data))
	if l.masked.Len() == 0 {
		return
	}
	// Live, as the ci test's output is.
	if f, err := s.Sink().Append(l.path, 0o644, s.Stream); err == nil {
		f.Write(l.masked.Bytes()) //nolint:errcheck // a live copy, best effort: the whole log is fetched again at the end
		f.Close()                 //nolint:errcheck // as the write above
	}
	l.masked.Reset()
}

// warn tells the person once per run: a line on the terminal (above the
// live line, which shows it too) and the receipt's train.warnings.
func (e *flow) warn(msg string) {
	msg = e.s.Redactor.String(msg)
	if slices.Contains(e.report.Warnings, msg) {
		return
	}
	e.report.Warnings = append(e.report.Warnings, msg)
	e.s.Infof("warning: %s", msg)
	e.s.ObserveWarning(msg)
}

// noteStatus takes what the controller records from one status answer:
// newly committed checkpoints (journaled), the resume proof the agent
// validated or observed, a workload that started below the restored step,
// and the agent's errors, warnings and disk warnings (each once). It
// returns the checkpoint record's journal error, after taking the rest: a
// failed journal write fails the step.
func (e *flow) noteStatus(inst provider.InstanceID, st agent.Report, seen map[string]bool) error {
	var jerr error
	if st.Checkpoint.StepSource != "" {
		e.report.StepSource = st.Checkpoint.StepSource
	}
	if cp := st.Checkpoint; cp.LastStep >= 0 {
		if e.report.LastCheckpoint == nil || e.report.LastCheckpoint.Step != cp.LastStep {
			e.s.Infof("checkpoint %d committed", cp.LastStep)
			jerr = e.s.Record("event", "checkpoint", map[string]any{"step": cp.LastStep, "manifest_sha256": cp.LastSHA256})
		}
		e.report.LastCheckpoint = &receipt.CheckpointRef{Step: cp.LastStep, ManifestSHA256: cp.LastSHA256}
	}
	if rs := st.Resume; rs != nil {
		var r *receipt.ResumeProof
		for i := range e.report.Resumes {
			if e.report.Resumes[i].Instance == inst {
				r = &e.report.Resumes[i]
			}
		}
		if r == nil { // restored by a controller that died since: the agent remembers
			e.report.Resumes = append(e.report.Resumes, receipt.ResumeProof{Instance: inst, RestoredStep: rs.RestoredStep})
			r = &e.report.Resumes[len(e.report.Resumes)-1]
		}
		if rs.ReportedStep != nil {
			r.ReportedStep = rs.ReportedStep
		}
		r.Proven = rs.Proven && rs.RestoredStep == r.RestoredStep
		r.ProvenBy = ""
		if r.Proven {
			r.ProvenBy = rs.ProvenBy
		}
		r.Read, r.ObservedStep, r.FirstStep = rs.Read, rs.ObservedStep, rs.FirstStep
		if rs.Regressed() && r.RegressedFrom == nil {
			from := r.RestoredStep
			r.RegressedFrom = &from
			e.warn(fmt.Sprintf("the workload on instance %d started at step %d, below the restored step %d: it did not resume from the checkpoint put back for it (%s)",
				inst, *rs.FirstStep, from, resumeHint(e.trainSpec())))
			if e.trainSpec().RequireResume {
				e.notResumed = fmt.Errorf("%w: the workload on instance %d started at step %d, below the restored step %d", ErrNotResumed, inst, *rs.FirstStep, from)
			}
		}
		if rs.Error != "" && !seen["proof"] {
			seen["proof"] = true
			e.s.Infof("resume proof on instance %d not accepted: %s", inst, e.s.Redactor.String(rs.Error))
		}
	}
	for _, msg := range st.Agent.Warnings {
		e.warn(fmt.Sprintf("agent on instance %d: %s", inst, msg))
	}
	for _, msg := range st.Agent.Errors {
		if !seen["err:"+msg] {
			seen["err:"+msg] = true
			e.s.Infof("agent on instance %d: %s", inst, e.s.Redactor.String(msg))
		}
	}
	if st.Disk.Low && !seen["disk"] {
		seen["disk"] = true
		e.s.Infof("warning: instance %d has %.1f GiB free, room for few more checkpoints of %.1f GiB (raise gpu.disk_gb or lower train.keep)",
			inst, float64(st.Disk.FreeBytes)/(1<<30), float64(st.Checkpoint.LastSize)/(1<<30))
	}
	return jerr
}

// trainOn sets up the instance if the agent says no workload was started
// there (agent binary, uploads, restore, workload started by the agent),
// then monitors it. Only a successful, typed answer can lead to a start,
// and the agent itself refuses a second workload.
func (e *flow) trainOn(ctx context.Context, c *remote.Client, inst provider.Instance, deadline time.Time) (trainEnd, error) {
	t := e.trainSpec()
	poll := max(t.Poll.Duration(), minTrainPoll)
	alog := e.newAttemptLog()
	// The dead-man switch Attach armed is beaten over its own channel, not
	// by the polls: a slow or failed poll cannot make the controller look
	// dead, and a dropped connection costs one redial of c, shared by both.
	defer e.s.KeepAlive(ctx, c, inst.ID)()
	// The contract's end and its host's price increases, once a pass (contract.go).
	e.contract, e.contractPollEvery = e.s.WatchContract(inst, deadline), poll
	seen := map[string]bool{}
	started := false        // this controller started or found the workload
	var lastCheck time.Time // the last pass's money check
	var budgetAt time.Time  // when spending reaches the budget less the cost of stopping
	// Known from the rental's price before the first pass, so the setup
	// pass (agent copy, uploads, restore, start: the slowest on a loaded
	// machine) is bounded by the budget's moment like every later one.
	if dph := e.s.State().Current().DPHTotal; dph > 0 {
		left := e.s.Frozen().MaxSpendUSD - e.s.SpentSoFar() - dph*min(e.s.TeardownLimit(), time.Minute).Hours()
		budgetAt = e.s.Now().Add(time.Duration(left / dph * float64(time.Hour)))
	}
	for pass := 0; ; pass++ {
		if pass > 0 {
			wait := e.s.Jittered(poll)
			if !budgetAt.IsZero() {
				wait = max(0, min(wait, budgetAt.Sub(e.s.Now())))
			}
			if err := e.s.Sleep(ctx, wait); err != nil {
				return trainEnd{}, err
			}
		}
		// A pass that stalls (a slow SSH round trip, a loaded machine)
		// must not carry spending past the budget: its calls end when the
		// budget's moment comes, in real time (budgetCtx).
		pctx, cancelPass := e.budgetCtx(ctx, budgetAt)
		end, err, done := e.trainPass(pctx, c, inst, alog, seen, &started)
		cancelPass()
		// Unless the workload finished in this very pass, a pass cut short
		// at the budget's moment is a budget stop (its failed calls say
		// nothing about the instance).
		if budgetReached(pctx, ctx) && (!done || end.exitCode == nil) {
			jerr := e.commitBeforeBudget(ctx, c, inst.ID, seen, e.s.State().Current().DPHTotal)
			return trainEnd{}, withJournal(&lifecycle.StepError{Step: "train", Outcome: lifecycle.OutcomeBudget, Err: fmt.Errorf("spending would pass budget.max_spend $%.4f once stopping is paid: the budget's moment came while the controller waited on instance %d: stopped with the last committed checkpoint", e.s.Frozen().MaxSpendUSD, inst.ID)}, jerr)
		}
		if done {
			return end, err
		}
		if end.again {
			continue
		}
		cur := end.cur
		// Money and time limits, on every pass: stop with the last committed
		// checkpoint. Stopping bills too (a final commit, destroy and
		// confirm), so the projection covers two polls plus the time allowed
		// for stopping.
		dph := cur.DPHTotal
		if dph == 0 {
			dph = e.s.State().Current().DPHTotal
		}
		stopping := min(e.s.TeardownLimit(), time.Minute)
		// Two passes as they really take (a slow SSH round trip or a busy
		// machine stretches a pass past the poll), never less than two polls.
		gap := poll
		if !lastCheck.IsZero() {
			gap = max(gap, e.s.Now().Sub(lastCheck))
		}
		lastCheck = e.s.Now()
		spent := e.s.SpentSoFar()
		projected := spent + dph*(2*gap+stopping).Hours()
		if projected > e.s.Frozen().MaxSpendUSD {
			jerr := e.commitBeforeBudget(ctx, c, inst.ID, seen, dph)
			return trainEnd{}, withJournal(&lifecycle.StepError{Step: "train", Outcome: lifecycle.OutcomeBudget, Err: fmt.Errorf("projected spend $%.4f would pass budget.max_spend $%.2f: stopped with the last committed checkpoint", projected, e.s.Frozen().MaxSpendUSD)}, jerr)
		}
		if dph > 0 {
			left := e.s.Frozen().MaxSpendUSD - spent - dph*stopping.Hours()
			budgetAt = e.s.Now().Add(time.Duration(left / dph * float64(time.Hour)))
		}
		if !e.s.Now().Before(deadline) {
			jerr := e.commitPending(ctx, c, inst.ID, seen)
			return trainEnd{}, withJournal(&lifecycle.StepError{Step: "train", Outcome: lifecycle.OutcomeTimeout, Err: fmt.Errorf("the runtime deadline %s passed", e.trainSpec().RuntimeDeadline)}, jerr)
		}
	}
}

// trainPass is one pass of trainOn's monitor: the API's view, the agent's
// status, the workload's end. done means trainOn returns end and err;
// otherwise end.cur is the instance as the API showed it, for the limits.
func (e *flow) trainPass(ctx context.Context, c *remote.Client, inst provider.Instance, alog *attemptLog, seen map[string]bool, started *bool) (end trainEnd, err error, done bool) {
	{
		if e.outbidNow(ctx, inst.ID) { // the API first: an outbid also breaks SSH
			return trainEnd{interrupted: "outbid", outbid: true}, nil, true
		}
		var st agent.Report
		var sshErr error
		if !*started {
			if sshErr = e.agentPresent(ctx, c); errors.Is(sshErr, errAgentMissing) {
				if err := e.startTraining(ctx, c, inst, true); err != nil {
					return trainEnd{}, err, true
				}
				*started = true
				return trainEnd{again: true}, nil, false
			}
		}
		if sshErr == nil {
			st, sshErr = e.askAgentLogs(ctx, c, inst.ID, alog)
		}
		if ctx.Err() != nil {
			return trainEnd{}, ctx.Err(), true
		}
		if errors.Is(sshErr, ErrAgentProtocol) {
			return trainEnd{}, &lifecycle.StepError{Step: "train", Instance: inst.ID, Err: sshErr}, true
		}
		if sshErr == nil && !*started {
			*started = true
			if st.Workload.State == agent.WorkloadAbsent {
				if err := e.startTraining(ctx, c, inst, false); err != nil {
					return trainEnd{}, err, true
				}
				return trainEnd{again: true}, nil, false
			}
			e.s.Infof("the workload is %s on instance %d; monitoring it", st.Workload.State, inst.ID)
		}
		cur, apiErr := e.s.Market.ShowInstance(ctx, inst.ID)
		if end, err, done := e.contractEnding(ctx, c, cur, apiErr, seen, *started); done {
			return end, err, true
		}
		switch {
		case errors.Is(apiErr, provider.ErrNotFound):
			return trainEnd{interrupted: "instance vanished"}, nil, true
		case apiErr == nil && isOutbid(e.s.State(), cur):
			return trainEnd{interrupted: "outbid", outbid: true}, nil, true
		case apiErr == nil && !cur.Running():
			return trainEnd{interrupted: lifecycle.InterruptionReason(cur)}, nil, true
		case sshErr != nil && apiErr == nil:
			// The instance runs; the answer is unknown, which is not a
			// "no": nothing is started, and the limits below still apply.
			e.s.Log.Debug("agent status failed while the API says running", "err", sshErr)
		case sshErr != nil:
			return trainEnd{interrupted: "SSH lost and the API cannot be read: " + sshErr.Error()}, nil, true
		}
		if sshErr == nil {
			jerr := e.noteStatus(inst.ID, st, seen)
			alog.add(e.s, st.Log)
			alog.addMetrics(e.s, st.Metrics)
			if jerr != nil { // a checkpoint the journal does not hold: no training past it
				return trainEnd{}, jerr, true
			}
			if e.notResumed != nil { // train.require_resume: redoing the work is not paid for
				return trainEnd{}, &lifecycle.StepError{Step: "train", Instance: inst.ID, Err: e.notResumed}, true
			}
			switch st.Workload.State {
			case agent.WorkloadExited:
				if st.Workload.Finalized {
					code := *st.Workload.ExitCode
					if st.Workload.Signal != "" {
						e.s.Infof("the workload was killed by signal %s", st.Workload.Signal)
					}
					return trainEnd{exitCode: &code}, e.finishTraining(ctx, c, inst.ID, code, alog), true
				}
			case agent.WorkloadLost:
				if lostToOutbid(e.s.State(), cur, apiErr) { // stopped and resumed between two polls
					return trainEnd{interrupted: "outbid", outbid: true}, nil, true
				}
				return trainEnd{}, &lifecycle.StepError{Step: "train", Instance: inst.ID, Err: fmt.Errorf("the workload on instance %d is lost: %s", inst.ID, st.Workload.Error)}, true
			}
			if st.Disk.Full {
				jerr := e.commitPending(ctx, c, inst.ID, seen)
				return trainEnd{}, withJournal(&lifecycle.StepError{Step: "train", Instance: inst.ID, Err: fmt.Errorf("instance %d has %d MiB free, too little for another checkpoint of %d MiB: stopped with the last committed checkpoint (raise gpu.disk_gb, lower train.keep, or save smaller checkpoints)", inst.ID, st.Disk.FreeBytes>>20, st.Checkpoint.LastSize>>20)}, jerr), true
			}
		}
		return trainEnd{cur: cur}, nil, false
	}
}

// watchSpec is the agent's checkpoint loop for `agent start`.
func watchSpec(t lifecycle.TrainSpec) agent.WatchSpec {
	return agent.WatchSpec{Store: t.CheckpointURI, Dir: t.CheckpointDir, Keep: t.Keep, Status: agent.StatusFile, Quiet: agent.Duration(t.QuietPeriod.Duration()),
		Files: t.CheckpointFile, Check: t.CheckpointCheck, StepFrom: t.StepFrom}
}

func (e *flow) startTraining(ctx context.Context, c *remote.Client, inst provider.Instance, needBinary bool) error {
	t := e.trainSpec()
	if needBinary {
		bin := e.s.AgentBinary
		if bin == "" {
			var err error
			if bin, err = os.Executable(); err != nil {
				return err
			}
		}
		if err := c.Run(ctx, remote.Command{Script: "mkdir -p " + filepath.Dir(remoteBin)}); err != nil {
			return fmt.Errorf("copy the agent to instance %d: %w", inst.ID, err)
		}
		if err := c.UploadContext(ctx, bin, remoteBin, nil); err != nil {
			return fmt.Errorf("copy the agent to instance %d: %w", inst.ID, err)
		}
	}
	if err := e.trainUpload(ctx, c, inst.ID); err != nil {
		return &lifecycle.StepError{Step: "upload", Instance: inst.ID, Err: err}
	}
	// Restore the last committed checkpoint that verifies.
	ac := e.agentOn(c, inst.ID)
	rs, err := ac.Restore(ctx, agent.RestoreRequest{Store: t.CheckpointURI, Dir: agent.ResumeDir, Files: t.CheckpointFile}, e.trainEnv(-1))
	if err = agentErr(err); errors.Is(err, ErrAgentProtocol) {
		return &lifecycle.StepError{Step: "train", Instance: inst.ID, Err: err}
	}
	if err != nil {
		return err
	}
	restart := e.started || len(e.s.State().Attempts) > 1
	if rs.Step < 0 && restart {
		e.report.Resumes = append(e.report.Resumes, receipt.ResumeProof{Instance: inst.ID, RestoredStep: -1, Restored: receipt.RestoredNone, Skipped: rs.Skipped})
		if err := e.s.Record("event", "restore", map[string]any{"instance_id": inst.ID, "step": -1, "skipped": len(rs.Skipped)}); err != nil {
			return err
		}
		e.warn(fmt.Sprintf("instance %d restored nothing: no checkpoint was committed before the interruption, so the workload starts from the beginning (%s)", inst.ID, commitHint(e.trainSpec())))
		if t.RequireResume {
			return &lifecycle.StepError{Step: "train", Instance: inst.ID, Err: fmt.Errorf("%w: instance %d had nothing to restore (no checkpoint was committed before the interruption)", ErrNotResumed, inst.ID)}
		}
	}
	if rs.Step >= 0 {
		e.s.Infof("restored checkpoint %d on instance %d", rs.Step, inst.ID)
		for _, s := range rs.Skipped {
			e.s.Infof("checkpoint %d failed verification and was skipped: %s", s.Step, s.Reason)
		}
		for _, p := range rs.Placed {
			e.s.Infof("put %s back at its path for the workload's own resume", p)
		}
		e.report.Resumes = append(e.report.Resumes, receipt.ResumeProof{Instance: inst.ID, RestoredStep: rs.Step, Skipped: rs.Skipped})
		if err := e.s.Record("event", "restore", map[string]any{"instance_id": inst.ID, "step": rs.Step, "manifest_sha256": rs.ManifestSHA256, "skipped": len(rs.Skipped)}); err != nil {
			return err // a restore the journal does not hold: no workload
		}
	}
	// The supervisor keeps no switch of its own: the instance's dead-man
	// switch, armed by Attach, destroys it when the controller is gone or
	// the runtime deadline (and teardown) has passed.
	w := watchSpec(e.trainSpec())
	w.Poll = agent.Duration(time.Second)
	if err := e.s.Record("intent", lifecycle.StepWork, map[string]any{"instance_id": inst.ID, "command": t.Command, "resume_step": rs.Step}); err != nil {
		return err // no intent, no workload
	}
	sr, err := ac.Start(ctx, agent.StartRequest{Command: t.Command, Watch: w}, e.trainEnv(rs.Step))
	if err = agentErr(err); errors.Is(err, ErrAgentProtocol) {
		return &lifecycle.StepError{Step: "train", Instance: inst.ID, Err: err}
	}
	if err != nil {
		return err
	}
	if !sr.Started {
		e.s.Infof("the agent on instance %d did not start a second workload (%s); monitoring the one it has", inst.ID, sr.Refused)
		return nil
	}
	e.started = true
	e.s.Infof("training started on instance %d", inst.ID)
	return nil
}

// resumeHint says what a workload that did not resume must do.
func resumeHint(t lifecycle.TrainSpec) string {
	if f := t.CheckpointFile; f != "" {
		return "it must load " + f + " when that file exists"
	}
	return "it must load $VASTRUN_RESUME_DIR when $VASTRUN_RESUME_STEP is set"
}

// commitHint says why nothing may have been committed.
func commitHint(t lifecycle.TrainSpec) string {
	switch {
	case t.CheckpointFile != "" && t.StepFrom != "":
		return "did the workload save " + t.CheckpointFile + " and print a line train.step_from matches?"
	case t.CheckpointFile != "":
		return "did the workload save " + t.CheckpointFile + "?"
	}
	return "did the workload write $VASTRUN_CHECKPOINT_DIR/STEP/ with .complete, or save one file (train.checkpoint_file)?"
}

// trainUpload copies `upload:` unless the instance already holds exactly
// those files (the agent's manifest matches the local one), and says how
// much it copies.
func (e *flow) trainUpload(ctx context.Context, c *remote.Client, inst provider.InstanceID) error {
	if len(e.s.Frozen().Upload) == 0 {
		return nil
	}
	local, err := agent.SumTree(e.s.RepoDir, e.s.Frozen().Upload)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	var paths []string
	for _, u := range e.s.Frozen().Upload {
		paths = append(paths, filepath.ToSlash(filepath.Clean(u)))
	}
	// Any failure here only means the files are copied.
	if m, err := e.agentOn(c, inst).Manifest(ctx, agent.ManifestRequest{Paths: paths}); err == nil && reflect.DeepEqual(m.Files, local) {
		e.s.Infof("uploads skipped: instance %d already has the same %d files", inst, len(local))
		return nil
	}
	var size int64
	for _, f := range local {
		size += f.Size
	}
	e.s.Infof("uploading %d files (%.1f MB) to instance %d", len(local), float64(size)/1e6, inst)
	return e.s.Upload(c)
}

// withJournal is a stop's error err with jerr, the journal's error from the
// final commit pass, when there was one.
func withJournal(err, jerr error) error {
	if jerr == nil {
		return err
	}
	return errors.Join(err, jerr)
}

// commitPending has the agent commit complete checkpoints now, under the
// same rules as its own passes, and takes the result; it returns the
// journal's error when a checkpoint it took could not be recorded (a
// failed pass is only logged: the last committed checkpoint stands).
func (e *flow) commitPending(ctx context.Context, c *remote.Client, inst provider.InstanceID, seen map[string]bool) error {
	t := e.trainSpec()
	w := agent.WatchSpec{Store: t.CheckpointURI, Dir: t.CheckpointDir, Keep: t.Keep, Status: agent.StatusFile, Quiet: agent.Duration(t.QuietPeriod.Duration())}
	if _, err := e.agentOn(c, inst).Commit(ctx, agent.CommitRequest{Watch: w}, e.trainEnv(-1)); err != nil {
		e.s.Log.Debug("final commit pass failed", "err", err)
	}
	if st, err := e.askAgent(ctx, c, inst, 0); err == nil {
		return e.noteStatus(inst, st, seen)
	}
	return nil
}

// finishTraining takes what the agent's final pass committed, uploads
// outputs with checksums and collects the log, result and proof.
func (e *flow) finishTraining(ctx context.Context, c *remote.Client, inst provider.InstanceID, code int, alog *attemptLog) error {
	t := e.trainSpec()
	logPath := filepath.Join(e.s.EvidenceDir, "train.log") // the directory: attemptLogFor
	// Read into memory and written through the sink: the raw logs never
	// lie on this machine's disk.
	if b, err := c.ReadFile(agent.LogFile, 64<<20); err == nil {
		b = e.s.Redactor.Bytes(b)
		e.s.Sink().WriteFile(logPath, b, 0o644)   //nolint:errcheck // evidence beside the receipt, best effort as before the sink
		e.s.Sink().WriteFile(alog.path, b, 0o644) //nolint:errcheck // as above
	}
	if b, err := c.ReadFile(agent.AgentLog, 16<<20); err == nil {
		e.s.Sink().WriteFile(filepath.Join(e.s.EvidenceDir, "agent.log"), b, 0o644) //nolint:errcheck // evidence beside the receipt, best effort
	}
	var jerr error
	if st, err := e.askAgent(ctx, c, inst, 0); err == nil {
		jerr = e.noteStatus(inst, st, map[string]bool{})
		st.Log = agent.LogChunk{Data: []byte{}, Size: st.Log.Size}
		if b, err := json.MarshalIndent(st, "", "  "); err == nil {
			e.s.Sink().WriteJSON(filepath.Join(e.s.EvidenceDir, "agent-status.json"), b, 0o644) //nolint:errcheck // evidence beside the receipt, best effort
		}
	}
	res := &receipt.TestOutcome{Log: "train.log", ExitCode: &code}
	e.s.FetchResult(c, res)
	e.report.Result = res.Result
	if jerr != nil { // the evidence is taken; nothing goes on past a record the journal lacks
		return jerr
	}
	if code != 0 {
		return nil
	}
	up, err := e.agentOn(c, inst).Upload(ctx, agent.UploadRequest{Store: t.OutputURI, Dir: t.OutputDir}, e.trainEnv(-1))
	if err != nil {
		return fmt.Errorf("upload outputs: %w", agentErr(err))
	}
	e.report.OutputsURI, e.report.OutputsSHA256 = t.OutputURI+"/outputs/000000000000", up.ManifestSHA256
	return e.s.Record("done", lifecycle.StepWork, map[string]any{"exit_code": code, "outputs_manifest_sha256": up.ManifestSHA256})
}

// fillTrainReport reads the committed checkpoints from the controller side
// (the agent's word is not the evidence: the store is).
func (e *flow) fillTrainReport(ctx context.Context) {
	if e.report == nil || e.trainSpec().CheckpointURI == "" {
		return
	}
	st, err := storage.Open(e.report.CheckpointURI, storage.Options{Getenv: storageGetenv(e.s)})
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if list, err := (checkpoint.Store{S: st}).Committed(cctx); err == nil && len(list) > 0 {
		e.report.LastCheckpoint = &receipt.CheckpointRef{Step: list[0].Step, ManifestSHA256: list[0].ManifestSHA256}
	}
}

func storageGetenv(s *lifecycle.Scope) func(string) string {
	return func(k string) string {
		if v, ok := s.StorageEnv[k]; ok {
			return v
		}
		return s.Getenv(k)
	}
}
