package run

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// The core's API for workflows (internal/workflow/*). A workflow drives a
// run with Drive or Resume and does its own work through these; it never
// reaches the configuration (Frozen is the run's spec) and never journals
// except through Record. Each call here is safe to make from the Body a
// workflow passes to Drive or Resume, on the run's goroutine.

// Now is the run's clock (injected: fake in tests, scaled under --sim).
func (e *Engine) Now() time.Time { return e.now() }

// Sleep waits d on the run's clock, or until ctx ends (its error).
func (e *Engine) Sleep(ctx context.Context, d time.Duration) error { return e.sleep(ctx, d) }

// Infof tells people (stderr) what the run does.
func (e *Engine) Infof(format string, args ...any) { e.infof(format, args...) }

// Frozen is the run's spec as frozen (or as accepted by
// --accept-config-change): every step input is read from it.
func (e *Engine) Frozen() Manifest { return e.frozen() }

// Record journals one record and applies it to the run's state. An error
// (wrapping ErrJournal) means it was not written: a failed intent's side
// effect must not be performed, and the run never counts as a success.
func (e *Engine) Record(typ, step string, data any) error { return e.record(typ, step, data) }

// Verify is the shared verify step on inst (image, GPU model, count,
// VRAM, CUDA, disk): a no-op when its condition is already True for inst.
func (e *Engine) Verify(ctx context.Context, c *remote.Client, inst provider.Instance) error {
	return e.verify(ctx, c, inst)
}

// Upload copies the frozen upload list (or the workdir archive) to the
// instance's login directory.
func (e *Engine) Upload(c *remote.Client) error { return e.upload(c) }

// TestEnv is the environment a command on the instance gets: the frozen
// env, the declared secrets (read from vastrun's environment, masked from
// here on) and the run's facts. A declared secret that is unset is an error.
func (e *Engine) TestEnv() (map[string]string, error) { return e.testEnv() }

// Work runs script on the instance under the frozen job timeout,
// streaming its redacted output to test.log, with its intent journaled
// first; the outcome carries the exit status and $VASTRUN_RESULT's JSON.
// A non-zero exit is not an error here; a timeout is (OutcomeTimeout).
func (e *Engine) Work(ctx context.Context, c *remote.Client, script string, env map[string]string) (*TestOutcome, error) {
	return e.work(ctx, c, script, env)
}

// FetchResult reads $VASTRUN_RESULT from the instance into res (masked)
// and keeps it as result.json in the evidence.
func (e *Engine) FetchResult(c *remote.Client, res *TestOutcome) { e.fetchResult(c, res) }

// Mark notes the moment a phase starts or ends (the receipt's overheads
// around the test use "test_start" and "test_end").
func (e *Engine) Mark(phase string) { e.mark(phase) }

// AddTiming adds d to the receipt's timing of phase.
func (e *Engine) AddTiming(phase string, d time.Duration) { e.timings.add(phase, d) }

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

// Manage runs w's lifecycle around work, for a workflow that provisions
// its own instances (Attach) as it goes: a new run (Begin) or, with
// resume, a run opened with Open (its frozen spec adopted as Resume
// does), then prepare, then work; teardown and the receipt follow on
// every path, a panic included. work closes the connections it opens.
func (e *Engine) Manage(ctx context.Context, w Workflow, resume bool, work func(ctx context.Context) error) (receipt *Receipt, err error) {
	if resume {
		e.Workflow, e.flow = w.Name(), w
		if err := e.adoptFrozen(ctx); err != nil {
			e.Close()
			return nil, err
		}
	} else {
		e.flow = w
		if err := e.Begin(w.Name()); err != nil {
			return nil, err
		}
	}
	defer e.Close()
	defer func() { receipt, err = e.settle(ctx, recover(), nil, false, err) }()
	if err := e.prepare(ctx); err != nil {
		return nil, err
	}
	return nil, work(ctx)
}

// Attach connects to the run's live instance (re-attaching after a
// controller restart), or replaces one that is gone or unreachable, or
// rents a new one (machines in exclude never): it never rents while the
// journal's current instance may still be alive. The instance is verified.
func (e *Engine) Attach(ctx context.Context, exclude []int64) (*remote.Client, provider.Instance, error) {
	return e.attach(ctx, exclude)
}

// DestroyConfirm destroys instance id and confirms it (by id and by a
// label listing), journaling intent first; deadline 0 is the frozen
// teardown limit.
func (e *Engine) DestroyConfirm(ctx context.Context, id provider.InstanceID, deadline time.Time) error {
	return e.destroyConfirm(ctx, id, deadline)
}

// SpentSoFar estimates the spend of all attempts up to now.
func (e *Engine) SpentSoFar() float64 { return e.spentSoFar() }

// Jittered spreads d by ±20% (the engine's jitter source).
func (e *Engine) Jittered(d time.Duration) time.Duration { return e.jittered(d) }

// TeardownLimit is the frozen teardown deadline.
func (e *Engine) TeardownLimit() time.Duration { return e.teardownLimit() }

// ObserveSteps tells live progress how far the workload is (step/total).
func (e *Engine) ObserveSteps(step, total int64) { e.observeSteps(step, total) }

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

// LastLines is the last n lines of s.
func LastLines(s string, n int) string { return lastLines(s, n) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// InterruptionReason says in the journal's words why a rented instance
// that should be running is not (terminal state, status message, and its
// actual_status).
func InterruptionReason(cur provider.Instance) string {
	return orDash(terminalReason(cur, stuckCreated) + " actual_status " + cur.ActualStatus)
}
