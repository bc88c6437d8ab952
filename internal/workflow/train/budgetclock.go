package train

import (
	"context"
	"errors"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
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
func (e *flow) budgetCtx(ctx context.Context, at time.Time) (context.Context, context.CancelFunc) {
	if at.IsZero() {
		return ctx, func() {}
	}
	d := at.Sub(e.s.Now())
	switch c := e.s.Clock.(type) {
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

// commitBeforeBudget is the budget stop's final commit pass, bounded so
// that it and the teardown after it fit in what is left of the budget at
// dph: the pass gets the time until spending would reach the budget less
// the teardown's own deadline, and none when that is already past (the last
// committed checkpoint stands). Its error is commitPending's.
func (e *flow) commitBeforeBudget(ctx context.Context, c *remote.Client, inst provider.InstanceID, seen map[string]bool, dph float64) error {
	if dph > 0 {
		teardown := min(e.s.TeardownLimit(), time.Minute)
		left := e.s.Frozen().MaxSpendUSD - e.s.SpentSoFar() - dph*teardown.Hours()
		if left <= 0 {
			e.s.Infof("no budget left for a final checkpoint commit on instance %d: the last committed checkpoint stands", inst)
			return nil
		}
		cctx, cancel := e.budgetCtx(ctx, e.s.Now().Add(time.Duration(left/dph*float64(time.Hour))))
		defer cancel()
		ctx = cctx
	}
	return e.commitPending(ctx, c, inst, seen)
}
