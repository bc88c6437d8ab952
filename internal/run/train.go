package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
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
const (
	remoteBin    = ".vastrun/bin/vastrun"
	heartbeat    = ".vastrun/heartbeat"
	agentStatus  = ".vastrun/agent.json"
	trainExit    = ".vastrun/train.exit"
	trainLog     = ".vastrun/train.log"
	resumeDir    = ".vastrun/restore"
	resumeProof  = ".vastrun/resumed_from"
	launchMark   = ".vastrun/launched"
	minTrainPoll = time.Second
)

// TrainReport is the training part of the receipt.
type TrainReport struct {
	CheckpointURI  string         `json:"checkpoint_uri"`
	LastCheckpoint *CheckpointRef `json:"last_checkpoint,omitempty"`
	Resumes        []ResumeProof  `json:"resumes"`
	OutputsURI     string         `json:"outputs_uri,omitempty"`
	OutputsSHA256  string         `json:"outputs_manifest_sha256,omitempty"`
	Result         map[string]any `json:"result,omitempty"`
	ExitCode       *int           `json:"exit_code,omitempty"`
}

// CheckpointRef names a committed checkpoint.
type CheckpointRef struct {
	Step           int64  `json:"step"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

// ResumeProof records one restore and what the workload said it resumed from.
type ResumeProof struct {
	Instance     provider.InstanceID `json:"instance_id"`
	RestoredStep int64               `json:"restored_step"`
	Skipped      []checkpoint.Skip   `json:"skipped_corrupt,omitempty"`
	ReportedStep *int64              `json:"reported_step"`
	Proven       bool                `json:"proven"`
}

// trainEnd is how one attempt's monitoring ended.
type trainEnd struct {
	interrupted string // non-empty: the instance failed under the workload
	exitCode    *int   // the workload finished
}

// ErrTrainFailed means the workload exited non-zero.
var ErrTrainFailed = errors.New("the training workload failed")

// RunTrain runs a checkpointed training run to completion, replacing
// interrupted instances and resuming from the last committed checkpoint.
func (e *Engine) RunTrain(ctx context.Context) (*Receipt, error) {
	if err := e.Begin("train"); err != nil {
		return nil, err
	}
	return e.trainDriver(ctx, true)
}

// ResumeTrain continues a run whose controller died, from its journal
// (opened with Open), re-attaching to a live instance instead of renting.
// A configuration that differs from the run's frozen manifest is refused
// before anything is touched (see AcceptConfigChange).
func (e *Engine) ResumeTrain(ctx context.Context) (*Receipt, error) {
	e.Workflow = "train"
	if err := e.adoptFrozen(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e.trainDriver(ctx, false)
}

func (e *Engine) trainDriver(ctx context.Context, fresh bool) (receipt *Receipt, err error) {
	defer e.Close()
	var client *remote.Client
	defer func() { receipt, err = e.settle(ctx, recover(), client, false, err) }()
	// Each run has its own prefix: a new run never resumes another's
	// checkpoints, and `resume` finds its own again by run id.
	c := &e.Config.Train
	c.CheckpointURI, c.OutputURI = runScoped(c.CheckpointURI, e.state.RunID), runScoped(c.OutputURI, e.state.RunID)
	e.train = &TrainReport{CheckpointURI: c.CheckpointURI, Resumes: []ResumeProof{}}
	if fresh {
		if err := e.prepare(ctx); err != nil {
			return nil, err
		}
	}
	for k, v := range e.StorageEnv {
		if strings.Contains(k, "SECRET") || strings.Contains(k, "TOKEN") || strings.Contains(k, "KEY_ID") {
			e.Redactor.Add(v)
		}
	}
	started := e.state.Started
	deadline := started.Add(e.Config.Train.RuntimeDeadline.Duration())
	var exclude []int64
	for _, a := range e.state.Attempts {
		if a.Failure != "" {
			exclude = append(exclude, a.MachineID)
		}
	}
	reconnects := 0
	for attempts := 0; ; attempts++ {
		var inst provider.Instance
		var err error
		client, inst, err = e.attach(ctx, exclude)
		if err != nil {
			return nil, err
		}
		end, err := e.trainOn(ctx, client, inst, deadline)
		client.Close()
		client = nil
		// SSH lost for good mid-step: look at the instance again (attach
		// re-attaches if it runs, replaces it if not) instead of failing.
		if err != nil && remote.Lost(err) && ctx.Err() == nil && reconnects < 3 {
			reconnects++
			attempts--
			e.infof("SSH to instance %d lost (%v); checking the instance again", inst.ID, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		if end.exitCode != nil {
			e.train.ExitCode = end.exitCode
			if *end.exitCode != 0 {
				return nil, fmt.Errorf("%w (exit status %d; see train.log)", ErrTrainFailed, *end.exitCode)
			}
			e.infof("training finished")
			return nil, nil
		}
		// Interrupted: destroy it (confirmed), exclude its machine, replace.
		t0 := e.now()
		if err := e.record("event", stepFailover, instanceData{Instance: inst.ID, Reason: end.interrupted}); err != nil {
			return nil, err // teardown destroys it
		}
		e.infof("instance %d interrupted (%s): destroying it and renting a replacement", inst.ID, end.interrupted)
		if err := e.destroyConfirm(context.WithoutCancel(ctx), inst.ID, time.Time{}); err != nil {
			return nil, err
		}
		e.timings.add("interruption_to_replacement_requested", e.now().Sub(t0))
		exclude = append(exclude, inst.MachineID)
		if attempts+1 >= e.Config.Train.MaxAttempts {
			return nil, &StepError{Step: "train", Outcome: OutcomeReadyFailed, Err: fmt.Errorf("interrupted %d times; giving up (train.max_attempts)", attempts+1)}
		}
	}
}

// attach connects to the run's live instance, or rents a new one. It never
// rents while the journal's current instance may still be alive.
func (e *Engine) attach(ctx context.Context, exclude []int64) (*remote.Client, provider.Instance, error) {
	// A controller that died mid-create left a rent intent without an id:
	// what it rented (if anything) is found by label, never rented again.
	if a := e.state.Current(); a != nil && a.InstanceID == 0 && a.Failure == "" {
		e.infof("the last create's outcome is unknown; reconciling by label %s", e.state.Label)
		if _, err := e.reconcile(ctx, 0); err != nil && !errors.Is(err, errNotRented) {
			return nil, provider.Instance{}, err
		}
	}
	if a := e.state.Current(); a != nil && a.InstanceID != 0 && !a.Confirmed && a.Failure == "" {
		inst, err := e.Market.ShowInstance(ctx, a.InstanceID)
		switch {
		case err == nil && inst.Running():
			e.infof("re-attaching to instance %d", inst.ID)
			client, err := e.connect(ctx, inst.ID, inst, e.now().Add(time.Duration(e.Config.Timeouts.Ready)))
			return client, inst, err
		case err == nil || errors.Is(err, provider.ErrNotFound):
			// Gone or not running: destroy whatever is left, then replace.
			if err := e.record("event", stepFailover, instanceData{Instance: a.InstanceID, Reason: "not running when the controller resumed"}); err != nil {
				return nil, inst, err
			}
			if err := e.destroyConfirm(context.WithoutCancel(ctx), a.InstanceID, time.Time{}); err != nil {
				return nil, inst, err
			}
			exclude = append(exclude, a.MachineID)
		default:
			return nil, inst, fmt.Errorf("check instance %d before resuming: %w", a.InstanceID, err)
		}
	}
	client, inst, err := e.provision(ctx, exclude)
	if err != nil {
		return nil, inst, err
	}
	if err := e.verify(ctx, client, inst); err != nil {
		client.Close()
		return nil, inst, err
	}
	return client, inst, nil
}

func (e *Engine) trainEnv(restored int64) map[string]string {
	t := e.Config.Train
	env := map[string]string{}
	for k, v := range e.Config.Env {
		env[k] = v
	}
	for k, v := range e.StorageEnv {
		env[k] = v
	}
	for _, name := range e.Config.Secrets {
		if v := e.Getenv(name); v != "" {
			env[name] = v
			e.Redactor.Add(v)
		}
	}
	env["VASTRUN_RUN_ID"] = e.state.RunID
	env["VASTRUN_CHECKPOINT_DIR"] = t.CheckpointDir
	env["VASTRUN_CHECKPOINT_EVERY"] = strconv.Itoa(t.Cadence)
	env["VASTRUN_OUTPUT_DIR"] = t.OutputDir
	env["VASTRUN_SEED"] = strconv.FormatInt(t.Seed, 10)
	env["VASTRUN_DATASET_VERSION"] = t.DatasetVersion
	env["VASTRUN_RESUME_PROOF"] = resumeProof
	env["VASTRUN_RESULT"] = ResultPath
	if restored >= 0 {
		env["VASTRUN_RESUME_STEP"] = strconv.FormatInt(restored, 10)
		env["VASTRUN_RESUME_DIR"] = resumeDir
	}
	env["VASTRUN_API_URL"] = e.APIURL
	return env
}

// trainOn sets up the instance if needed (agent binary, uploads, restore,
// workload and agent started detached), then monitors it.
func (e *Engine) trainOn(ctx context.Context, c *remote.Client, inst provider.Instance, deadline time.Time) (trainEnd, error) {
	t := e.Config.Train
	// Launched but its pid not written yet (a launch cut off by a dropped
	// connection) counts as running: a second workload must never start.
	// A launched workload that died without an exit status may be started
	// again. The probe always exits 0, so an error is a transport failure.
	running, err := c.Output(ctx, `if [ -f `+trainExit+` ]; then echo finished
elif [ -f .vastrun/train.pid ] && kill -0 "$(cat .vastrun/train.pid)" 2>/dev/null; then echo yes
elif [ -d `+launchMark+` ] && [ ! -f .vastrun/train.pid ]; then echo yes
else rm -rf `+launchMark+`; fi; true`)
	if err != nil {
		return trainEnd{}, fmt.Errorf("check the workload on instance %d: %w", inst.ID, err)
	}
	if !strings.Contains(running, "yes") && !strings.Contains(running, "finished") {
		if err := e.startTraining(ctx, c, inst); err != nil {
			return trainEnd{}, err
		}
	} else {
		e.infof("the workload is still running on instance %d; monitoring it", inst.ID)
	}
	poll := max(t.Poll.Duration(), minTrainPoll)
	for {
		if err := e.sleep(ctx, e.jittered(poll)); err != nil {
			return trainEnd{}, err
		}
		// One round trip: heartbeat, agent status, exit status, proof.
		out, sshErr := c.Output(ctx, `mkdir -p .vastrun && touch `+heartbeat+`; echo "==agent"; cat `+agentStatus+` 2>/dev/null; echo; echo "==exit"; cat `+trainExit+` 2>/dev/null; echo "==proof"; cat `+resumeProof+` 2>/dev/null; true`)
		if ctx.Err() != nil {
			return trainEnd{}, ctx.Err()
		}
		cur, apiErr := e.Market.ShowInstance(ctx, inst.ID)
		switch {
		case errors.Is(apiErr, provider.ErrNotFound):
			return trainEnd{interrupted: "instance vanished"}, nil
		case apiErr == nil && !cur.Running():
			return trainEnd{interrupted: orDash(terminalReason(cur, stuckCreated) + " actual_status " + cur.ActualStatus)}, nil
		case sshErr != nil && apiErr == nil:
			e.Log.Debug("SSH poll failed while the API says running", "err", sshErr)
			continue
		case sshErr != nil:
			return trainEnd{interrupted: "SSH lost and the API cannot be read: " + sshErr.Error()}, nil
		}
		sec := splitSections(out)
		if st, err := agent.ReadStatus([]byte(strings.TrimSpace(sec["agent"]))); err == nil && st.LastStep >= 0 {
			if e.train.LastCheckpoint == nil || e.train.LastCheckpoint.Step != st.LastStep {
				e.infof("checkpoint %d committed", st.LastStep)
				e.record("event", "checkpoint", map[string]any{"step": st.LastStep, "manifest_sha256": st.LastSHA256})
			}
			e.train.LastCheckpoint = &CheckpointRef{Step: st.LastStep, ManifestSHA256: st.LastSHA256}
		}
		if p := strings.TrimSpace(sec["proof"]); p != "" && len(e.train.Resumes) > 0 {
			r := &e.train.Resumes[len(e.train.Resumes)-1]
			if n, err := strconv.ParseInt(p, 10, 64); err == nil && r.Instance == inst.ID {
				r.ReportedStep = &n
				r.Proven = n == r.RestoredStep
			}
		}
		if code := strings.TrimSpace(sec["exit"]); code != "" {
			n, _ := strconv.Atoi(code)
			return trainEnd{exitCode: &n}, e.finishTraining(ctx, c, n)
		}
		// Money and time limits: stop with the last committed checkpoint.
		// Stopping bills too (a final commit, destroy and confirm), so the
		// projection covers two polls plus the time allowed for stopping.
		dph := cur.DPHTotal
		if dph == 0 {
			dph = e.state.Current().DPHTotal
		}
		stopping := min(time.Duration(e.Config.Timeouts.Teardown), time.Minute)
		projected := e.spentSoFar() + dph*(2*poll+stopping).Hours()
		if projected > e.Config.Budget.MaxSpend {
			e.commitPending(ctx, c)
			return trainEnd{}, &StepError{Step: "train", Outcome: OutcomeBudget, Err: fmt.Errorf("projected spend $%.4f would pass budget.max_spend $%.2f: stopped with the last committed checkpoint", projected, e.Config.Budget.MaxSpend)}
		}
		if !e.now().Before(deadline) {
			e.commitPending(ctx, c)
			return trainEnd{}, &StepError{Step: "train", Outcome: OutcomeTimeout, Err: fmt.Errorf("the runtime deadline %s passed", e.Config.Train.RuntimeDeadline)}
		}
	}
}

func (e *Engine) startTraining(ctx context.Context, c *remote.Client, inst provider.Instance) error {
	t := e.Config.Train
	bin := e.AgentBinary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := c.Upload(bin, remoteBin); err != nil {
		return fmt.Errorf("copy the agent to instance %d: %w", inst.ID, err)
	}
	if err := e.upload(c); err != nil {
		return &StepError{Step: "upload", Instance: inst.ID, Err: err}
	}
	// Restore the last committed checkpoint that verifies.
	base := e.trainEnv(-1)
	var out, errOut strings.Builder
	err := c.Run(ctx, remote.Command{Env: base, Stdout: &out, Stderr: &errOut, Script: remoteBin + " agent restore --json --store " + remote.ShellQuote(t.CheckpointURI) + " --dir " + resumeDir})
	if err != nil {
		return fmt.Errorf("restore on instance %d: %w: %s", inst.ID, err, e.Redactor.String(strings.TrimSpace(lastLines(errOut.String(), 5))))
	}
	var rs struct {
		Step    int64             `json:"step"`
		SHA     string            `json:"manifest_sha256"`
		Skipped []checkpoint.Skip `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &rs); err != nil {
		return fmt.Errorf("restore on instance %d: bad answer %q", inst.ID, out.String())
	}
	if rs.Step >= 0 {
		e.infof("restored checkpoint %d on instance %d", rs.Step, inst.ID)
		for _, s := range rs.Skipped {
			e.infof("checkpoint %d failed verification and was skipped: %s", s.Step, s.Reason)
		}
		e.train.Resumes = append(e.train.Resumes, ResumeProof{Instance: inst.ID, RestoredStep: rs.Step, Skipped: rs.Skipped})
		e.record("event", "restore", map[string]any{"instance_id": inst.ID, "step": rs.Step, "manifest_sha256": rs.SHA, "skipped": len(rs.Skipped)})
	}
	env := e.trainEnv(rs.Step)
	agentCmd := fmt.Sprintf("%s agent watch --store %s --dir %s --keep %d --heartbeat %s --ttl %s --deadline %s --status %s --poll 1s --quiet %s",
		remoteBin, remote.ShellQuote(t.CheckpointURI), remote.ShellQuote(t.CheckpointDir), t.Keep, heartbeat,
		t.HeartbeatTTL.Duration(), e.state.Started.Add(t.RuntimeDeadline.Duration()).UTC().Format(time.RFC3339), agentStatus, t.QuietPeriod.Duration())
	// The mark makes the launch happen at most once per instance, even when
	// a dropped connection makes this script's fate unknown.
	script := fmt.Sprintf(`mkdir -p .vastrun && { mkdir `+launchMark+` 2>/dev/null || exit 0; }
mkdir -p %s %s && rm -f %s %s .vastrun/train.pid && touch %s
setsid nohup %s > .vastrun/agent.log 2>&1 < /dev/null &
setsid nohup sh -c '%s; echo $? > %s' > %s 2>&1 < /dev/null &
echo $! > .vastrun/train.pid`,
		remote.ShellQuote(t.CheckpointDir), remote.ShellQuote(t.OutputDir), trainExit, resumeProof, heartbeat,
		agentCmd, strings.ReplaceAll(t.Command, "'", `'\''`), trainExit, trainLog)
	if err := e.record("intent", stepWork, map[string]any{"instance_id": inst.ID, "command": t.Command, "resume_step": rs.Step}); err != nil {
		return err // no intent, no workload
	}
	if err := c.Run(ctx, remote.Command{Env: env, Script: script}); err != nil {
		return fmt.Errorf("start training on instance %d: %w", inst.ID, err)
	}
	e.infof("training started on instance %d", inst.ID)
	return nil
}

// commitPending has the agent commit complete checkpoints now.
func (e *Engine) commitPending(ctx context.Context, c *remote.Client) {
	t := e.Config.Train
	c.Run(ctx, remote.Command{Env: e.trainEnv(-1), Script: fmt.Sprintf("%s agent watch --once --store %s --dir %s --keep %d --status %s",
		remoteBin, remote.ShellQuote(t.CheckpointURI), remote.ShellQuote(t.CheckpointDir), t.Keep, agentStatus)})
	if out, err := c.Output(ctx, "cat "+agentStatus); err == nil {
		if st, err := agent.ReadStatus([]byte(out)); err == nil && st.LastStep >= 0 {
			e.train.LastCheckpoint = &CheckpointRef{Step: st.LastStep, ManifestSHA256: st.LastSHA256}
		}
	}
}

// finishTraining commits the last checkpoints, uploads outputs with
// checksums and collects the log, result and proof.
func (e *Engine) finishTraining(ctx context.Context, c *remote.Client, code int) error {
	t := e.Config.Train
	e.commitPending(ctx, c)
	os.MkdirAll(e.EvidenceDir, 0o755)
	logPath := filepath.Join(e.EvidenceDir, "train.log")
	if err := c.Download(trainLog, logPath+".raw", 64<<20); err == nil {
		b, _ := os.ReadFile(logPath + ".raw")
		os.WriteFile(logPath, e.Redactor.Bytes(b), 0o644)
		os.Remove(logPath + ".raw")
	}
	res := &TestOutcome{Log: "train.log", ExitCode: code}
	e.fetchResult(c, res)
	e.train.Result = res.Result
	if code != 0 {
		return nil
	}
	var out, errOut strings.Builder
	err := c.Run(ctx, remote.Command{Env: e.trainEnv(-1), Stdout: &out, Stderr: &errOut, Script: fmt.Sprintf("%s agent upload --json --store %s --dir %s",
		remoteBin, remote.ShellQuote(t.OutputURI), remote.ShellQuote(t.OutputDir))})
	if err != nil {
		return fmt.Errorf("upload outputs: %w: %s", err, e.Redactor.String(strings.TrimSpace(lastLines(errOut.String(), 5))))
	}
	var up struct {
		SHA string `json:"manifest_sha256"`
	}
	json.Unmarshal([]byte(strings.TrimSpace(out.String())), &up)
	e.train.OutputsURI, e.train.OutputsSHA256 = t.OutputURI+"/outputs/000000000000", up.SHA
	e.record("done", stepWork, map[string]any{"exit_code": code, "outputs_manifest_sha256": up.SHA})
	return nil
}

// fillTrainReport reads the committed checkpoints from the controller side
// (the agent's word is not the evidence: the store is).
func (e *Engine) fillTrainReport(ctx context.Context) {
	if e.train == nil || e.Config.Train.CheckpointURI == "" {
		return
	}
	st, err := storage.Open(e.Config.Train.CheckpointURI, storage.Options{Getenv: e.storageGetenv()})
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if list, err := (checkpoint.Store{S: st}).Committed(cctx); err == nil && len(list) > 0 {
		e.train.LastCheckpoint = &CheckpointRef{Step: list[0].Step, ManifestSHA256: list[0].ManifestSHA256}
	}
}

func (e *Engine) storageGetenv() func(string) string {
	return func(k string) string {
		if v, ok := e.StorageEnv[k]; ok {
			return v
		}
		return e.Getenv(k)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
