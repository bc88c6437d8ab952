package canary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/remote"
)

// deadShell is an instance whose SSH connection fails every call.
type deadShell struct{ err error }

func (d deadShell) Output(context.Context, string) (string, error) { return "", d.err }
func (d deadShell) Run(context.Context, remote.Command) error      { return d.err }

// A GPU-side capture that fails in transport is evidence that is missing,
// not an answer: the check says why, the receipt and the summary note it,
// the failure's evidence file says so, and the GPU list is never read as
// "no GPU" (which would turn a dropped connection into gpu_only_failure).
func TestCanaryCaptureFailureIsReportedNotDecided(t *testing.T) {
	secret := "s3cr3t-token-value"
	e := newFlow(lifecycle.New(&lifecycle.Deps{Redactor: redact.New(secret), EvidenceDir: t.TempDir()}), false)
	dropped := deadShell{errors.New("ssh: connection lost while talking to " + secret)}

	chk := e.cudaCheck(context.Background(), dropped, nil)
	if chk.CaptureError == "" || !strings.Contains(chk.CaptureError, "connection lost") || strings.Contains(chk.CaptureError, secret) {
		t.Fatalf("capture error: %q", chk.CaptureError)
	}
	if !chk.Passed || len(chk.GPUs) != 0 {
		t.Fatalf("an unknown GPU list decided the check: %+v", chk)
	}

	e.collectFailureEvidence(context.Background(), dropped, provider.Instance{ID: 7})
	if len(e.report.CaptureErrors) != 2 || e.report.FailureEvidence == "" {
		t.Fatalf("receipt: %+v", e.report)
	}
	b, err := os.ReadFile(filepath.Join(e.s.EvidenceDir, e.report.FailureEvidence))
	if err != nil || !strings.Contains(string(b), "capture failed: ") {
		t.Fatalf("evidence file: %q %v", b, err)
	}
	md := receipt.Summary(&receipt.Receipt{Workflow: Name, Sections: receipt.Sections{Canary: e.report}})
	if !strings.Contains(md, "| not captured | the GPU's identity (nvidia-smi): ssh: connection lost") {
		t.Fatalf("summary:\n%s", md)
	}

	// A capture that answers is not reported.
	ok := &receipt.CanaryReport{}
	e.report = ok
	chk = e.cudaCheck(context.Background(), answer("==csv\nNVIDIA H100, 81559, 550.54\n==smi\n| CUDA Version: 12.4 |\n"), nil)
	if chk.CaptureError != "" || len(ok.CaptureErrors) != 0 || !chk.Passed || chk.CUDA != 12.4 || chk.GPUs[0].MemoryMiB != 81559 {
		t.Fatalf("a good capture: %+v %+v", chk, ok)
	}
	// An empty answer (no nvidia-smi) is the GPU's answer: it fails the check.
	chk = e.cudaCheck(context.Background(), answer(""), nil)
	if chk.Passed || chk.CaptureError != "" {
		t.Fatalf("no GPU passed: %+v", chk)
	}
}

type answer string

func (a answer) Output(context.Context, string) (string, error) { return string(a), nil }
func (a answer) Run(context.Context, remote.Command) error      { return nil }

func TestDeltaFieldLevel(t *testing.T) {
	local := map[string]any{"device": "cpu", "sum": 42.0, "metrics": map[string]any{"loss": 0.5, "time": 1.0}, "only_local": true}
	gpu := map[string]any{"device": "cuda", "sum": 42.0, "metrics": map[string]any{"loss": 0.25, "time": 0.1}}
	d := Delta(local, gpu, []string{"device", "metrics.time"})
	if len(d) != 2 || d[0].Field != "metrics.loss" || d[0].Local != 0.5 || d[0].GPU != 0.25 || d[1].Field != "only_local" || d[1].GPU != nil {
		t.Fatalf("%+v", d)
	}
	if d := Delta(local, local, nil); len(d) != 0 {
		t.Fatalf("identical results differ: %+v", d)
	}
}

// The canary's outcome is its comparison once the run went through, the
// shared class otherwise; its Error carries the class to lifecycle.Outcome.
func TestOutcomeIsTheComparison(t *testing.T) {
	f := newFlow(lifecycle.New(&lifecycle.Deps{}), false)
	f.report.Comparison = receipt.CanaryOutputDelta
	if got := f.Flow().Outcome(nil, receipt.Passed); got != receipt.Outcome(receipt.CanaryOutputDelta) {
		t.Fatalf("went through: %s", got)
	}
	if got := f.Flow().Outcome(errors.New("rent failed"), receipt.Error); got != receipt.Error {
		t.Fatalf("did not go through: %s", got)
	}
	if got := lifecycle.Outcome(fmt.Errorf("wrapped: %w", &Error{Class: receipt.CanaryGPUOnlyFailure})); got != receipt.Outcome(receipt.CanaryGPUOnlyFailure) {
		t.Fatalf("lifecycle.Outcome of a canary Error: %s", got)
	}
}
