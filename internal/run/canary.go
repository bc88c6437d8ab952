package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

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
}

// FieldDelta is one field that differs between the CPU and GPU results.
type FieldDelta struct {
	Field string `json:"field"`
	Local any    `json:"local"`
	GPU   any    `json:"gpu"`
}

// CUDACheck is what the GPU-only check saw.
type CUDACheck struct {
	GPUs     []GPUInfo `json:"gpus"`
	CUDA     float64   `json:"cuda_version"`
	Command  string    `json:"command,omitempty"`
	ExitCode int       `json:"exit_code"`
	Output   string    `json:"output,omitempty"`
	Passed   bool      `json:"passed"`
}

// CanaryReport is the canary part of the receipt.
type CanaryReport struct {
	Local      SmokeOutcome  `json:"local"`
	LocalNote  string        `json:"local_note,omitempty"`
	GPU        *SmokeOutcome `json:"gpu,omitempty"`
	CUDA       *CUDACheck    `json:"cuda,omitempty"`
	Health     *HealthCheck  `json:"health,omitempty"` // canary.health_url through an SSH forward
	Comparison string        `json:"comparison,omitempty"`
	Delta      []FieldDelta  `json:"delta,omitempty"`
	// FailureEvidence names the file with driver, CUDA, image and command
	// details collected before teardown after a GPU-only failure.
	FailureEvidence string `json:"gpu_failure_evidence,omitempty"`
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

// containerEngine finds a working docker or podman.
func containerEngine() string {
	for _, name := range []string{"docker", "podman"} {
		if _, err := exec.LookPath(name); err == nil {
			if exec.Command(name, "info").Run() == nil {
				return name
			}
		}
	}
	return ""
}

func (e *Engine) localContract(ctx context.Context, allowFailure bool) error {
	cc := e.Config.Canary
	if cc.Unit != "" {
		e.infof("local unit tests: %s", cc.Unit)
		if code, err := e.localRun(ctx, cc.Unit, "unit.log", nil); err != nil || code != 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.canary.Local = SmokeOutcome{Where: "host", ExitCode: code, Log: "unit.log"}
			return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: unit tests exited %d", ErrLocalFailed, code)}
		}
	}
	resultPath, _ := filepath.Abs(filepath.Join(e.EvidenceDir, "local-result.json"))
	env := map[string]string{"VASTRUN_DEVICE": "cpu", "VASTRUN_RESULT": resultPath}
	where := "host-cpu"
	script := cc.Smoke
	if eng := containerEngine(); eng != "" {
		if _, err := os.Stat(filepath.Join(e.RepoDir, "Dockerfile")); err == nil {
			where = eng
			tag := "vastrun-canary:" + e.state.RunID
			e.infof("building the image locally with %s", eng)
			if code, err := e.localRun(ctx, eng+" build -t "+tag+" .", "build.log", nil); err != nil || code != 0 {
				return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: %s build exited %d", ErrLocalFailed, eng, code)}
			}
			dir := filepath.Dir(resultPath)
			script = fmt.Sprintf("%s run --rm -e VASTRUN_DEVICE=cpu -e VASTRUN_RESULT=/vastrun/local-result.json -v %s:/vastrun %s sh -c %s",
				eng, remote.ShellQuote(dir), tag, remote.ShellQuote(cc.Smoke))
		}
	} else {
		e.canary.LocalNote = "no container engine (docker or podman) is available: the smoke command ran directly on this host in CPU mode"
		e.infof("%s", e.canary.LocalNote)
	}
	e.infof("local smoke (%s): %s", where, cc.Smoke)
	code, err := e.localRun(ctx, script, "local-smoke.log", env)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	out := e.judgeSmoke(where, code, resultPath, "local-smoke.log")
	e.canary.Local = out
	if !out.Passed && !allowFailure {
		return &StepError{Step: "canary local", Outcome: OutcomeLocalFailed, Err: fmt.Errorf("%w: smoke exited %d (want %d), missing fields %v", ErrLocalFailed, code, cc.ExpectExit, out.MissingFields)}
	}
	return nil
}

// localRun runs a shell command in the repository, logging to evidence.
func (e *Engine) localRun(ctx context.Context, script, logName string, env map[string]string) (int, error) {
	f, err := os.Create(filepath.Join(e.EvidenceDir, logName))
	if err != nil {
		return -1, err
	}
	defer f.Close()
	var sink io.Writer = f
	if e.Stream != nil {
		sink = io.MultiWriter(f, e.Stream)
	}
	w := e.Redactor.Writer(sink)
	defer w.Close()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir, cmd.Stdout, cmd.Stderr = e.RepoDir, w, w
	cmd.Env = os.Environ()
	for k, v := range e.Config.Env { // the same contract locally and on the GPU
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

func (e *Engine) judgeSmoke(where string, code int, resultPath, log string) SmokeOutcome {
	out := SmokeOutcome{Where: where, ExitCode: code, Log: log}
	if b, err := os.ReadFile(resultPath); err == nil {
		json.Unmarshal(e.Redactor.JSON(b), &out.Result)
	}
	for _, f := range e.Config.Canary.ExpectFields {
		if _, ok := lookup(out.Result, f); !ok {
			out.MissingFields = append(out.MissingFields, f)
		}
	}
	out.Passed = code == e.Config.Canary.ExpectExit && len(out.MissingFields) == 0
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

// flatten turns nested objects into dotted fields.
func flatten(prefix string, v any, out map[string]any) {
	if obj, ok := v.(map[string]any); ok {
		for k, x := range obj {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, x, out)
		}
		return
	}
	out[prefix] = v
}

// Delta compares two JSON results field by field, skipping ignored fields
// (and everything under them).
func Delta(local, gpu map[string]any, ignore []string) []FieldDelta {
	a, b := map[string]any{}, map[string]any{}
	flatten("", local, a)
	flatten("", gpu, b)
	ignored := func(f string) bool {
		for _, ig := range ignore {
			if f == ig || strings.HasPrefix(f, ig+".") {
				return true
			}
		}
		return false
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []FieldDelta
	for k := range keys {
		if ignored(k) {
			continue
		}
		if av, bv := a[k], b[k]; !reflect.DeepEqual(av, bv) {
			out = append(out, FieldDelta{Field: k, Local: av, GPU: bv})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
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
	cc := e.Config.Canary
	e.infof("GPU smoke on instance %d: %s", inst.ID, cc.Smoke)
	e.mark("test_start")
	res, err := e.work(ctx, c, cc.Smoke, env)
	e.mark("test_end")
	if err != nil {
		return err
	}
	gpu := SmokeOutcome{Where: "gpu", ExitCode: res.ExitCode, Result: res.Result, Log: "test.log"}
	for _, f := range cc.ExpectFields {
		if _, ok := lookup(gpu.Result, f); !ok {
			gpu.MissingFields = append(gpu.MissingFields, f)
		}
	}
	gpu.Passed = res.ExitCode == cc.ExpectExit && len(gpu.MissingFields) == 0
	e.canary.GPU = &gpu
	e.canary.CUDA = e.cudaCheck(ctx, c, env)
	if cc.HealthURL != "" {
		h := e.checkHealth(ctx, c)
		e.canary.Health = h
		e.infof("health %s through an SSH forward: passed=%t after %d attempt(s) %s", h.URL, h.Passed, h.Attempts, h.Error)
		gpu.Passed = gpu.Passed && h.Passed
	}

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
		if d := Delta(local.Result, gpu.Result, cc.IgnoreFields); len(d) > 0 {
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

func (e *Engine) cudaCheck(ctx context.Context, c *remote.Client, env map[string]string) *CUDACheck {
	chk := &CUDACheck{Command: e.Config.Canary.CUDACheck}
	out, _ := c.Output(ctx, `echo "==csv"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits; echo "==smi"; nvidia-smi; true`)
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
	chk.Passed = len(chk.GPUs) > 0 && chk.CUDA > 0
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
func (e *Engine) collectFailureEvidence(ctx context.Context, c *remote.Client, inst provider.Instance) {
	out, _ := c.Output(ctx, `echo "== nvidia-smi"; nvidia-smi; echo "== nvidia-smi -L"; nvidia-smi -L; echo "== kernel"; uname -a; echo "== environment names"; env | cut -d= -f1 | sort; echo "== disk"; df -h .; true`)
	body := fmt.Sprintf("instance %d on machine %d\nimage (pinned): %s\nimage_uuid (reported): %s\ndriver %s, CUDA %.1f\nsmoke command: %s\ncuda check: %s\n\n%s",
		inst.ID, inst.MachineID, e.Config.Image, inst.ImageUUID, inst.DriverVersion, inst.CUDAMax, e.Config.Canary.Smoke, e.Config.Canary.CUDACheck, out)
	name := "gpu-failure-evidence.txt"
	if os.WriteFile(filepath.Join(e.EvidenceDir, name), []byte(e.Redactor.String(body)), 0o644) == nil {
		e.canary.FailureEvidence = name
	}
}
