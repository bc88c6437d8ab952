package run

import (
	"context"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// ResumeCanary continues a canary run whose controller died (opened with
// Open), as ResumeCI does for ci: the frozen manifest must match, a live
// instance is re-attached to and never rented again. The local contract
// runs again first — its result is what the GPU side is compared with, it
// is not journaled, and it costs nothing — then the GPU smoke, the CUDA
// check and the comparison.
func (e *Engine) ResumeCanary(ctx context.Context, allowLocalFailure bool) (*Receipt, error) {
	e.canary = &CanaryReport{}
	e.beforeRent = func(ctx context.Context) error { return e.localContract(ctx, allowLocalFailure) }
	return e.resume(ctx, canaryWorkflow{e}, func(c *remote.Client, inst provider.Instance) error {
		return e.gpuCanary(ctx, c, inst)
	})
}
