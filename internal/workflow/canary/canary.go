package canary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/smoke"
	"github.com/vastrun/vastrun/internal/text"
)

// instanceShell is what the canary's evidence capture needs of the
// instance's SSH connection (*remote.Client).
type instanceShell interface {
	Output(ctx context.Context, script string) (string, error)
	Run(ctx context.Context, cmd remote.Command) error
}

// captureFailed notes evidence that could not be captured.
func (e *flow) captureFailed(what string, err error) string {
	msg := e.s.Redactor.String(fmt.Sprintf("%s: %v", what, err))
	e.report.CaptureErrors = append(e.report.CaptureErrors, msg)
	e.s.Infof("canary: could not capture %s (the run goes on; the receipt notes it)", msg)
	return msg
}

func (e *flow) localContract(ctx context.Context, allowFailure bool) error {
	cc := e.canarySpec()
	if cc.Unit != "" {
		e.s.Infof("local unit tests: %s", cc.Unit)
		uctx, cancel := e.withClockTimeout(ctx, localTimeout(cc.Timeouts.Unit.Duration()))
		code, err := e.localRun(uctx, cc.Unit, "unit.log", nil)
		timedOut := timedOut(uctx)
		cancel()
		if err != nil || code != 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.report.Local = receipt.SmokeOutcome{Where: "host", ExitCode: code, Log: "unit.log", TimedOut: timedOut}
			if timedOut {
				return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests ran past canary.timeouts.unit %s and were stopped", ErrLocalFailed, localTimeout(cc.Timeouts.Unit.Duration()))}
			}
			if err != nil {
				return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests: %w", ErrLocalFailed, err)}
			}
			return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests exited %d", ErrLocalFailed, code)}
		}
	}
	// The smoke writes its result outside the evidence and the state, in a
	// directory of its own that only this user can read; what the evidence
	// keeps (local-result.json) is the masked copy, written through the
	// sink (keepLocalResult).
	resultDir, err := os.MkdirTemp("", "vastrun-local-result-")
	if err != nil {
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: err}
	}
	defer os.RemoveAll(resultDir) //nolint:errcheck // a private temporary directory: a leftover costs only disk
	resultPath := filepath.Join(resultDir, localResult)
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
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: err}
	}
	limit := localTimeout(cc.Timeouts.Smoke.Duration())
	sctx, cancel := e.withClockTimeout(ctx, limit)
	var code int
	if eng != nil {
		where = eng.Name
		code, err = e.containerSmoke(sctx, eng, file, resultPath, env)
	} else {
		e.report.LocalNote = note
		e.s.Infof("%s", note)
		e.s.Infof("local smoke (%s): %s", where, cc.Smoke)
		code, err = e.localRun(sctx, cc.Smoke, "local-smoke.log", env)
	}
	late := timedOut(sctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && eng != nil && !late {
		e.report.Local = receipt.SmokeOutcome{Where: where, ExitCode: code, Log: "local-smoke.log"}
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: err}
	}
	out := e.judgeSmoke(where, code, resultPath, "local-smoke.log")
	if late {
		out.Passed, out.TimedOut = false, true
	}
	e.report.Local = out
	if !out.Passed && !allowFailure {
		if late {
			return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: the smoke ran past canary.timeouts.smoke %s and was stopped", ErrLocalFailed, limit)}
		}
		if err != nil {
			return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: smoke: %w", ErrLocalFailed, err)}
		}
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: smoke exited %d (want %d), missing fields %v", ErrLocalFailed, code, cc.ExpectExit, out.MissingFields)}
	}
	return nil
}

// localRun runs a shell command in the repository, logging to evidence.
func (e *flow) localRun(ctx context.Context, script, logName string, env map[string]string) (int, error) {
	w, closeLog, err := e.evidenceLog(logName)
	if err != nil {
		return -1, err
	}
	defer closeLog()
	full, err := e.localEnv(env)
	if err != nil {
		return -1, err
	}
	return smoke.Local{Dir: e.s.RepoDir}.Run(ctx, script, full, w)
}

// localResult is the evidence file of the local smoke's result.
const localResult = "local-result.json"

// keepLocalResult copies the local smoke's result, masked, into the
// evidence and returns the masked copy (nil when the smoke wrote none).
func (e *flow) keepLocalResult(resultPath string) []byte {
	b, err := os.ReadFile(resultPath)
	if err != nil {
		return nil
	}
	masked := e.s.Redactor.JSON(b)
	if err := e.s.Sink().WriteJSON(filepath.Join(e.s.EvidenceDir, localResult), masked, 0o644); err != nil {
		e.captureFailed("the local smoke's result ("+localResult+")", err)
	}
	return masked
}

func (e *flow) judgeSmoke(where string, code int, resultPath, log string) receipt.SmokeOutcome {
	out := receipt.SmokeOutcome{Where: where, ExitCode: code, Log: log}
	if b := e.keepLocalResult(resultPath); b != nil {
		json.Unmarshal(b, &out.Result) //nolint:errcheck // a result that is not a JSON object leaves Result empty: its expected fields are then missing
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
func Delta(local, gpu map[string]any, ignore []string) []receipt.FieldDelta {
	return smoke.Compare(local, gpu, smoke.CompareOptions{Ignore: ignore})
}

// compareResults compares under canary.compare (tolerance, ignore) and the
// older canary.ignore_fields.
func (e *flow) compareResults(local, gpu map[string]any) []receipt.FieldDelta {
	cc := e.canarySpec()
	return smoke.Compare(local, gpu, smoke.CompareOptions{Tolerance: cc.Compare.Tolerance, Ignore: append(append([]string{}, cc.IgnoreFields...), cc.Compare.Ignore...)})
}

func (e *flow) gpuCanary(ctx context.Context, c *remote.Client, inst provider.Instance) error {
	if err := e.s.Verify(ctx, c, inst); err != nil {
		return err
	}
	if err := e.s.Upload(c); err != nil {
		return &lifecycle.StepError{Step: "upload", Instance: inst.ID, Err: err}
	}
	env, err := e.s.TestEnv()
	if err != nil {
		return err
	}
	env["VASTRUN_DEVICE"] = "gpu"
	cc := e.canarySpec()
	e.s.Infof("GPU smoke on instance %d: %s", inst.ID, cc.Smoke)
	var gpu receipt.SmokeOutcome
	if cc.IsServer() {
		e.s.Mark("test_start")
		out, err := e.gpuServerSmoke(ctx, c, env)
		e.s.Mark("test_end")
		if err != nil {
			return err
		}
		gpu = out
	} else {
		e.s.Mark("test_start")
		res, err := e.s.Work(ctx, c, cc.Smoke, env)
		e.s.Mark("test_end")
		if err != nil {
			return err
		}
		gpu = receipt.SmokeOutcome{Where: "gpu", ExitCode: res.Code(), Result: res.Result, Log: "test.log"}
		for _, f := range cc.ExpectFields {
			if _, ok := lookup(gpu.Result, f); !ok {
				gpu.MissingFields = append(gpu.MissingFields, f)
			}
		}
		gpu.Passed = res.ExitCode != nil && *res.ExitCode == cc.ExpectExit && len(gpu.MissingFields) == 0
	}
	e.report.GPU = &gpu
	e.report.CUDA = e.cudaCheck(ctx, c, env)

	local := e.report.Local
	switch {
	case local.Passed && (!gpu.Passed || !e.report.CUDA.Passed):
		e.report.Comparison = receipt.CanaryGPUOnlyFailure
		e.collectFailureEvidence(ctx, c, inst)
	case !local.Passed && gpu.Passed:
		e.report.Comparison = receipt.CanaryLocalOnlyFailure
	case !local.Passed:
		e.report.Comparison = receipt.CanaryBothFailed
	default:
		if d := e.compareResults(local.Result, gpu.Result); len(d) > 0 {
			e.report.Comparison, e.report.Delta = receipt.CanaryOutputDelta, d
		} else {
			e.report.Comparison = receipt.CanaryMatch
		}
	}
	e.s.Infof("canary: %s", e.report.Comparison)
	if e.report.Comparison != receipt.CanaryMatch {
		return &Error{Class: e.report.Comparison}
	}
	return nil
}

func (e *flow) cudaCheck(ctx context.Context, c instanceShell, env map[string]string) *receipt.CUDACheck {
	chk := &receipt.CUDACheck{Command: e.canarySpec().CUDACheck}
	// The script always exits 0 (a missing nvidia-smi is an empty answer,
	// "no GPU"), so an error is the transport's: the answer is unknown.
	out, err := c.Output(ctx, `echo "==csv"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits; echo "==smi"; nvidia-smi; true`)
	if err != nil {
		chk.CaptureError = e.captureFailed("the GPU's identity (nvidia-smi)", err)
	}
	sec := lifecycle.SplitSections(out)
	for _, line := range strings.Split(strings.TrimSpace(sec["csv"]), "\n") {
		parts := strings.Split(line, ",")
		if len(parts) >= 3 {
			var mem int
			fmt.Sscan(strings.TrimSpace(parts[1]), &mem) //nolint:errcheck // a memory size nvidia-smi did not print as a number is reported as 0
			chk.GPUs = append(chk.GPUs, receipt.GPUInfo{Name: strings.TrimSpace(parts[0]), MemoryMiB: mem, Driver: strings.TrimSpace(parts[2])})
		}
	}
	chk.CUDA = lifecycle.CUDAVersion(sec["smi"])
	chk.Passed = chk.CaptureError != "" || (len(chk.GPUs) > 0 && chk.CUDA > 0)
	if chk.Command != "" {
		var buf strings.Builder
		err := c.Run(ctx, remote.Command{Script: chk.Command, Env: env, Output: &buf})
		var ee *remote.ExitError
		if errors.As(err, &ee) {
			chk.ExitCode = ee.Code
		} else if err != nil {
			chk.ExitCode = -1
		}
		chk.Output = e.s.Redactor.String(text.LastLines(buf.String(), 20))
		chk.Passed = chk.Passed && chk.ExitCode == 0
	}
	return chk
}

// collectFailureEvidence keeps what explains a GPU-only failure, before the
// instance is destroyed.
func (e *flow) collectFailureEvidence(ctx context.Context, c instanceShell, inst provider.Instance) {
	out, err := c.Output(ctx, `echo "== nvidia-smi"; nvidia-smi; echo "== nvidia-smi -L"; nvidia-smi -L; echo "== kernel"; uname -a; echo "== environment names"; env | cut -d= -f1 | sort; echo "== disk"; df -h .; true`)
	body := fmt.Sprintf("instance %d on machine %d\nimage (pinned): %s\nimage_uuid (reported): %s\ndriver %s, CUDA %.1f\nsmoke command: %s\ncuda check: %s\n\n%s",
		inst.ID, inst.MachineID, e.s.Frozen().Image, inst.ImageUUID, inst.DriverVersion, inst.CUDAMax, e.canarySpec().Smoke, e.canarySpec().CUDACheck, out)
	if err != nil {
		body += "\n(capture failed: " + e.captureFailed("the GPU-only failure's environment (nvidia-smi, kernel, env names, disk)", err) + ")\n"
	}
	name := "gpu-failure-evidence.txt"
	if e.s.Sink().WriteFile(filepath.Join(e.s.EvidenceDir, name), []byte(body), 0o644) == nil {
		e.report.FailureEvidence = name
	}
}
