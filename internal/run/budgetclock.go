package run

import (
	"context"
	"errors"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// errBudgetMoment ends a training pass whose calls were still waiting when
// spending reached the budget less the cost of stopping.
var errBudgetMoment = errors.New("spending reached the budget less the cost of stopping")

// budgetCtx bounds ctx by the moment at (engine time), so that no call of a
// stalled pass keeps a rental billing past the budget. The bound runs in
// real time: engine time converted for the simulator's scaled clock. A test's
// fake clock only moves when something waits on it, so a background timer
// would run it away; there the pass is left unbounded and the projection
// alone guards the budget. A zero at means no bound yet.
func (e *Engine) budgetCtx(ctx context.Context, at time.Time) (context.Context, context.CancelFunc) {
	if at.IsZero() {
		return ctx, func() {}
	}
	d := at.Sub(e.now())
	switch c := e.Clock.(type) {
	case clock.Real, *clock.Real:
	case *clock.Scaled:
		if c.Factor > 0 {
			d = time.Duration(float64(d) / c.Factor)
		}
	default:
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, max(d, 0), errBudgetMoment)
}

// budgetReached reports whether pctx (from budgetCtx) ended at the budget's
// moment while the run's own ctx is still live.
func budgetReached(pctx, ctx context.Context) bool {
	return ctx.Err() == nil && errors.Is(context.Cause(pctx), errBudgetMoment)
}
