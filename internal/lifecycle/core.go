package lifecycle

import (
	"context"
	"strconv"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/text"
)

// The core's API for workflows (internal/workflow/*). A workflow drives a
// run with Drive or Resume and does its own work through these; it never
// reaches the configuration (Frozen is the run's spec) and never journals
// except through Record. Each call here is safe to make from the Body a
// workflow passes to Drive or Resume, on the run's goroutine.

// Verify is the shared verify step on inst (image, GPU model, count,
// VRAM, CUDA, disk): a no-op when its condition is already True for inst.
func (e *Scope) Verify(ctx context.Context, c *remote.Client, inst provider.Instance) error {
	return verify(ctx, e, c, inst)
}

// Upload copies the frozen upload list (or the workdir archive) to the
// instance's login directory.
func (e *Scope) Upload(c *remote.Client) error { return upload(e, c) }

// TestEnv is the environment a command on the instance gets: the frozen
// env, the declared secrets (read from vastrun's environment, masked from
// here on) and the run's facts. A declared secret that is unset is an error.
func (e *Scope) TestEnv() (map[string]string, error) { return testEnv(e) }

// Work runs script on the instance under the frozen job timeout,
// streaming its redacted output to test.log, with its intent journaled
// first; the outcome carries the exit status and $VASTRUN_RESULT's JSON.
// A non-zero exit is not an error here; a timeout is (OutcomeTimeout).
func (e *Scope) Work(ctx context.Context, c *remote.Client, script string, env map[string]string) (*receipt.TestOutcome, error) {
	return work(ctx, e, c, script, env)
}

// FetchResult reads $VASTRUN_RESULT from the instance into res (masked)
// and keeps it as result.json in the evidence.
func (e *Scope) FetchResult(c *remote.Client, res *receipt.TestOutcome) { fetchResult(e, c, res) }

// AddTiming adds d to the receipt's timing of phase.
func (e *Run) AddTiming(phase string, d time.Duration) { e.timings.add(phase, d) }

// FrozenDuration reads a duration the manifest froze as text (0 when absent).
func FrozenDuration(s string) time.Duration { return frozenDuration(s) }

// Journal steps a workflow writes (with the payload types State.Apply
// reads back: InstanceData, InterruptedData, ResumedData, BidData).
const (
	// StepWork: a workflow's own work on the instance (intent before it
	// starts, done or failed after).
	StepWork = stepWork
	// StepFailover: an instance is given up (InstanceData with the
	// reason); the destroy and a replacement follow.
	StepFailover = stepFailover
	// StepInterrupted, StepResumed, StepBid: an interruptible rental was
	// outbid, ran again, or had its bid placed or raised.
	StepInterrupted = stepInterrupted
	StepResumed     = stepResumed
	StepBid         = stepBid
)

// Attach (deadman.go) connects to the run's live instance (re-attaching
// after a controller restart), or replaces one that is gone or
// unreachable, or rents a new one (machines in exclude never): it never
// rents while the journal's current instance may still be alive. The
// instance is verified and its dead-man switch armed.

// DestroyConfirm destroys instance id and confirms it by id, journaling
// intent first (the teardown's label listing adds its evidence later);
// deadline 0 is the frozen teardown limit.
func (e *Scope) DestroyConfirm(ctx context.Context, id provider.InstanceID, deadline time.Time) error {
	return destroyConfirm(ctx, e, id, deadline)
}

// SplitSections splits the output of a remote script that prints
// "==name" headers into its sections (for answers of the image's own
// tools, e.g. nvidia-smi; never for anything the workload writes).
func SplitSections(out string) map[string]string { return splitSections(out) }

// CUDAVersion is the CUDA version nvidia-smi's banner names (0 when none).
func CUDAVersion(smi string) float64 {
	var v float64
	if m := cudaRE.FindStringSubmatch(smi); m != nil {
		v, _ = strconv.ParseFloat(m[1], 64)
	}
	return v
}

// InterruptionReason says in the journal's words why a rented instance
// that should be running is not (terminal state, status message, and its
// actual_status).
func InterruptionReason(cur provider.Instance) string {
	return text.OrDash(terminalReason(cur, stuckCreated) + " actual_status " + cur.ActualStatus)
}
