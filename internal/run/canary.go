package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/canary"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// Canary comparison classes.
const (
	CanaryMatch            = "match"
	CanaryGPUOnlyFailure   = "gpu_only_failure"
	CanaryLocalOnlyFailure = "local_only_failure"
	CanaryBothFailed       = "both_failed"
	CanaryOutputDelta      = "output_delta"
	OutcomeLocalFailed     = "local_failed"
)

// SmokeOutcome is one run of the smoke contract.
type SmokeOutcome struct {
	Where         string         `json:"where"` // host-cpu, docker, podman, gpu
	ExitCode      int            `json:"exit_code"`
	Result        map[string]any `json:"result,omitempty"`
	MissingFields []string       `json:"missing_fields,omitempty"`
	Passed        bool           `json:"passed"`
	Log           string         `json:"log"`
	// Server is the server smoke contract's report (health_url or ports set).
	Server *canary.ServerReport `json:"server,omitempty"`
	// TimedOut: the local step ran past canary.timeouts.unit or .smoke.
	TimedOut bool `json:"timed_out,omitempty"`
}

// FieldDelta is one field that differs between the CPU and GPU results.
type FieldDelta = canary.FieldDelta

// CUDACheck is what the GPU-only check saw.
type CUDACheck struct {
	GPUs     []GPUInfo `json:"gpus"`
	CUDA     float64   `json:"cuda_version"`
	Command  string    `json:"command,omitempty"`
	ExitCode int       `json:"exit_code"`
	Output   string    `json:"output,omitempty"`
	Passed   bool      `json:"passed"`
	// CaptureError is why nvidia-smi's answer could not be read from the
	// instance (a transport failure, not the GPU's answer): the GPU list is
	// then unknown, which is reported, never taken as "no GPU".
	CaptureError string `json:"capture_error,omitempty"`
}

// CanaryReport is the canary part of the receipt.
type CanaryReport struct {
	Local      SmokeOutcome  `json:"local"`
	LocalNote  string        `json:"local_note,omitempty"`
	GPU        *SmokeOutcome `json:"gpu,omitempty"`
	CUDA       *CUDACheck    `json:"cuda,omitempty"`
	Health     *HealthCheck  `json:"health,omitempty"` // canary.health_url, probed on the instance
	Comparison string        `json:"comparison,omitempty"`
	Delta      []FieldDelta  `json:"delta,omitempty"`
	// FailureEvidence names the file with driver, CUDA, image and command
	// details collected before teardown after a GPU-only failure.
	FailureEvidence string `json:"gpu_failure_evidence,omitempty"`
	// CaptureErrors lists the evidence the controller could not capture
	// from the instance (GPU identity, the failure's environment), with
	// why. Evidence, not a decision: the outcome does not change.
	CaptureErrors []string `json:"capture_errors,omitempty"`
}

// instanceShell is what the canary's evidence capture needs of the
// instance's SSH connection (*remote.Client).
type instanceShell interface {
	Output(ctx context.Context, script string) (string, error)
	Run(ctx context.Context, cmd remote.Command) error
}

// captureFailed notes evidence that could not be captured.
func (e *Engine) captureFailed(what string, err error) string {
	msg := e.Redactor.String(fmt.Sprintf("%s: %v", what, err))
	e.canary.CaptureErrors = append(e.canary.CaptureErrors, msg)
	e.infof("canary: could not capture %s (the run goes on; the receipt notes it)", msg)
	return msg
}

// CanaryError reports a canary whose GPU outcome disagrees with the local one.
type CanaryError struct{ Class string }

func (e *CanaryError) Error() string { return "canary: " + e.Class }

// ErrLocalFailed means the local contract failed, so nothing was rented.
var ErrLocalFailed = errors.New("the local contract failed: nothing was rented")

// RunCanary proves the contract locally, then on the smallest GPU rental.
func (e *Engine) RunCanary(ctx context.Context, allowLocalFailure bool) (*Receipt, error) {
	e.canary, e.flow = &CanaryReport{}, canaryWorkflow{e}
	e.beforeRent = func(ctx context.Context) error { return e.localContract(ctx, allowLocalFailure) }
	return e.drive(ctx, "canary", false, func(c *remote.Client, inst provider.Instance) error {
		return e.gpuCanary(ctx, c, inst)
	})
}

func (e *Engine) localContract(ctx context.Context, allowFailure bool) error {
	cc := e.canarySpec()
	if cc.Unit != "" {
		e.infof("local unit tests: %s", cc.Unit)
		uctx, cancel := e.withClockTimeout(ctx, localTimeout(cc.Timeouts.Unit.Duration()))
		code, err := e.localRun(uctx, cc.Unit, "unit.log", nil)
		timedOut := timedOut(uctx)
		cancel()
		if err != nil || code != 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.canary.Local = SmokeOutcome{Where: "host", ExitCode: code, Log: "unit.log", TimedOut: timedOut}
			if timedOut {
				return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests ran past canary.timeouts.unit %s and were stopped", ErrLocalFailed, localTimeout(cc.Timeouts.Unit.Duration()))}
			}
			if err != nil {
				return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests: %w", ErrLocalFailed, err)}
			}
			return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests exited %d", ErrLocalFailed, code)}
		}
	}
	resultPath, _ := filepath.Abs(filepath.Join(e.EvidenceDir, "local-result.json"))
	env := map[string]string{"VASTRUN_DEVICE": "cpu", "VASTRUN_RESULT": resultPath}
	if cc.IsServer() {
		return e.localServerSmoke(ctx, env, resultPath, allowFailure)
	}
	where := "host-cpu"
	// The container path (canarycontainer.go): the engine, the build file,
	// or the note saying why the smoke runs on the host. Build and run are
	// bounded together by canary.timeouts.smoke.
	eng, file, note, err := e.localContainer(ctx)
	if err != nil {
		return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: err}
	}
	limit := localTimeout(cc.Timeouts.Smoke.Duration())
	sctx, cancel := e.withClockTimeout(ctx, limit)
	var code int
	if eng != nil {
		where = eng.Name
		code, err = e.containerSmoke(sctx, eng, file, resultPath, env)
	} else {
		e.canary.LocalNote = note
		e.infof("%s", note)
		e.infof("local smoke (%s): %s", where, cc.Smoke)
		code, err = e.localRun(sctx, cc.Smoke, "local-smoke.log", env)
	}
	late := timedOut(sctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && eng != nil && !late {
		e.canary.Local = SmokeOutcome{Where: where, ExitCode: code, Log: "local-smoke.log"}
		return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: err}
	}
	out := e.judgeSmoke(where, code, resultPath, "local-smoke.log")
	if late {
		out.Passed, out.TimedOut = false, true
	}
	e.canary.Local = out
	if !out.Passed && !allowFailure {
		if late {
			return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: the smoke ran past canary.timeouts.smoke %s and was stopped", ErrLocalFailed, limit)}
		}
		if err != nil {
			return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: smoke: %w", ErrLocalFailed, err)}
		}
		return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: smoke exited %d (want %d), missing fields %v", ErrLocalFailed, code, cc.ExpectExit, out.MissingFields)}
	}
	return nil
}

// localRun runs a shell command in the repository, logging to evidence.
func (e *Engine) localRun(ctx context.Context, script, logName string, env map[string]string) (int, error) {
	w, closeLog, err := e.evidenceLog(logName)
	if err != nil {
		return -1, err
	}
	defer closeLog()
	full, err := e.localEnv(env)
	if err != nil {
		return -1, err
	}
	return canary.Local{Dir: e.RepoDir}.Run(ctx, script, full, w)
}

func (e *Engine) judgeSmoke(where string, code int, resultPath, log string) SmokeOutcome {
	out := SmokeOutcome{Where: where, ExitCode: code, Log: log}
	if b, err := os.ReadFile(resultPath); err == nil {
		json.Unmarshal(e.Redactor.JSON(b), &out.Result)
	}
	for _, f := range e.canarySpec().ExpectFields {
		if _, ok := lookup(out.Result, f); !ok {
			out.MissingFields = append(out.MissingFields, f)
		}
	}
	out.Passed = code == e.canarySpec().ExpectExit && len(out.MissingFields) == 0
	return out
}

// lookup finds a dotted field ("metrics.loss") in a JSON object.
func lookup(m map[string]any, field string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(field, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Delta compares two JSON results field by field, skipping ignored fields
// (and everything under them), exactly (no tolerance).
func Delta(local, gpu map[string]any, ignore []string) []FieldDelta {
	return canary.Compare(local, gpu, canary.CompareOptions{Ignore: ignore})
}

// compareResults compares under canary.compare (tolerance, ignore) and the
// older canary.ignore_fields.
func (e *Engine) compareResults(local, gpu map[string]any) []FieldDelta {
	cc := e.canarySpec()
	return canary.Compare(local, gpu, canary.CompareOptions{Tolerance: cc.Compare.Tolerance, Ignore: append(append([]string{}, cc.IgnoreFields...), cc.Compare.Ignore...)})
}

func (e *Engine) gpuCanary(ctx context.Context, c *remote.Client, inst provider.Instance) error {
	if err := e.verify(ctx, c, inst); err != nil {
		return err
	}
	if err := e.upload(c); err != nil {
		return &StepError{Step: "upload", Instance: inst.ID, Err: err}
	}
	env, err := e.testEnv()
	if err != nil {
		return err
	}
	env["VASTRUN_DEVICE"] = "gpu"
	cc := e.canarySpec()
	e.infof("GPU smoke on instance %d: %s", inst.ID, cc.Smoke)
	var gpu SmokeOutcome
	if cc.IsServer() {
		e.mark("test_start")
		out, err := e.gpuServerSmoke(ctx, c, env)
		e.mark("test_end")
		if err != nil {
			return err
		}
		gpu = out
	} else {
		e.mark("test_start")
		res, err := e.work(ctx, c, cc.Smoke, env)
		e.mark("test_end")
		if err != nil {
			return err
		}
		gpu = SmokeOutcome{Where: "gpu", ExitCode: res.ExitCode, Result: res.Result, Log: "test.log"}
		for _, f := range cc.ExpectFields {
			if _, ok := lookup(gpu.Result, f); !ok {
				gpu.MissingFields = append(gpu.MissingFields, f)
			}
		}
		gpu.Passed = res.ExitCode == cc.ExpectExit && len(gpu.MissingFields) == 0
	}
	e.canary.GPU = &gpu
	e.canary.CUDA = e.cudaCheck(ctx, c, env)

	local := e.canary.Local
	switch {
	case local.Passed && (!gpu.Passed || !e.canary.CUDA.Passed):
		e.canary.Comparison = CanaryGPUOnlyFailure
		e.collectFailureEvidence(ctx, c, inst)
	case !local.Passed && gpu.Passed:
		e.canary.Comparison = CanaryLocalOnlyFailure
	case !local.Passed:
		e.canary.Comparison = CanaryBothFailed
	default:
		if d := e.compareResults(local.Result, gpu.Result); len(d) > 0 {
			e.canary.Comparison, e.canary.Delta = CanaryOutputDelta, d
		} else {
			e.canary.Comparison = CanaryMatch
		}
	}
	e.infof("canary: %s", e.canary.Comparison)
	if e.canary.Comparison != CanaryMatch {
		return &CanaryError{Class: e.canary.Comparison}
	}
	return nil
}

func (e *Engine) cudaCheck(ctx context.Context, c instanceShell, env map[string]string) *CUDACheck {
	chk := &CUDACheck{Command: e.canarySpec().CUDACheck}
	// The script always exits 0 (a missing nvidia-smi is an empty answer,
	// "no GPU"), so an error is the transport's: the answer is unknown.
	out, err := c.Output(ctx, `echo "==csv"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits; echo "==smi"; nvidia-smi; true`)
	if err != nil {
		chk.CaptureError = e.captureFailed("the GPU's identity (nvidia-smi)", err)
	}
	sec := splitSections(out)
	for _, line := range strings.Split(strings.TrimSpace(sec["csv"]), "\n") {
		parts := strings.Split(line, ",")
		if len(parts) >= 3 {
			var mem int
			fmt.Sscan(strings.TrimSpace(parts[1]), &mem)
			chk.GPUs = append(chk.GPUs, GPUInfo{Name: strings.TrimSpace(parts[0]), MemoryMiB: mem, Driver: strings.TrimSpace(parts[2])})
		}
	}
	if m := cudaRE.FindStringSubmatch(sec["smi"]); m != nil {
		fmt.Sscan(m[1], &chk.CUDA)
	}
	chk.Passed = chk.CaptureError != "" || (len(chk.GPUs) > 0 && chk.CUDA > 0)
	if chk.Command != "" {
		var buf strings.Builder
		err := c.Run(ctx, remote.Command{Script: chk.Command, Env: env, Stdout: &buf, Stderr: &buf})
		var ee *remote.ExitError
		if errors.As(err, &ee) {
			chk.ExitCode = ee.Code
		} else if err != nil {
			chk.ExitCode = -1
		}
		chk.Output = e.Redactor.String(lastLines(buf.String(), 20))
		chk.Passed = chk.Passed && chk.ExitCode == 0
	}
	return chk
}

// collectFailureEvidence keeps what explains a GPU-only failure, before the
// instance is destroyed.
func (e *Engine) collectFailureEvidence(ctx context.Context, c instanceShell, inst provider.Instance) {
	out, err := c.Output(ctx, `echo "== nvidia-smi"; nvidia-smi; echo "== nvidia-smi -L"; nvidia-smi -L; echo "== kernel"; uname -a; echo "== environment names"; env | cut -d= -f1 | sort; echo "== disk"; df -h .; true`)
	body := fmt.Sprintf("instance %d on machine %d\nimage (pinned): %s\nimage_uuid (reported): %s\ndriver %s, CUDA %.1f\nsmoke command: %s\ncuda check: %s\n\n%s",
		inst.ID, inst.MachineID, e.frozen().Image, inst.ImageUUID, inst.DriverVersion, inst.CUDAMax, e.canarySpec().Smoke, e.canarySpec().CUDACheck, out)
	if err != nil {
		body += "\n(capture failed: " + e.captureFailed("the GPU-only failure's environment (nvidia-smi, kernel, env names, disk)", err) + ")\n"
	}
	name := "gpu-failure-evidence.txt"
	if os.WriteFile(filepath.Join(e.EvidenceDir, name), []byte(e.Redactor.String(body)), 0o644) == nil {
		e.canary.FailureEvidence = name
	}
}
