package receipt

import (
	"github.com/vastrun/vastrun/internal/smoke"
)

// The canary's section of the receipt (`canary`, docs/receipt.md) and its
// outcome classes: the canary workflow (internal/workflow/canary) fills it.

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
	Server *smoke.ServerReport `json:"server,omitempty"`
	// TimedOut: the local step ran past canary.timeouts.unit or .smoke.
	TimedOut bool `json:"timed_out,omitempty"`
}

// FieldDelta is one field that differs between the CPU and GPU results.
type FieldDelta = smoke.FieldDelta

// GPUInfo is one GPU as nvidia-smi reports it (the core's verify step and
// the canary's CUDA check both record it).
type GPUInfo struct {
	Name      string `json:"name"`
	MemoryMiB int    `json:"memory_mib"`
	Driver    string `json:"driver_version"`
}

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

// HealthCheck is what the canary's health_url answered on the instance,
// during the server smoke contract (see smoke.RunServer): the URL names
// a host:port as the instance sees it, usually its own loopback.
type HealthCheck struct {
	URL      string `json:"url"`
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Passed   bool   `json:"passed"`
	Error    string `json:"error,omitempty"`
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
