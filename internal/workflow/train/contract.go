package train

import (
	"context"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// contractEnding is training's part of the contract watch (lifecycle's
// ContractWatch), once per monitoring pass: it takes the instance as the
// API showed it (its end date), answers the host's price increases, and
// when the contract ends before training would be done it commits a last
// checkpoint and ends the attempt as an interruption, so that the
// instance is replaced within policy before its contract ends (or, if it
// ended already, after). done is false while the contract holds.
func (e *flow) contractEnding(ctx context.Context, c *remote.Client, cur provider.Instance, apiErr error, seen map[string]bool, started bool) (end trainEnd, err error, done bool) {
	w := e.contract
	if w == nil {
		return trainEnd{}, nil, false
	}
	if apiErr == nil {
		w.Observe(cur)
	}
	if err := w.Check(ctx); err != nil {
		return trainEnd{}, err, true
	}
	ended := w.Ending(e.contractPollEvery)
	if ended == nil {
		return trainEnd{}, nil, false
	}
	if apiErr == nil && cur.Running() && started {
		e.s.Infof("the contract of instance %d ends %s (%s), before training would be done: committing a last checkpoint, then replacing it",
			cur.ID, ended.End.UTC().Format(time.RFC3339), ended.Why)
		if err := e.commitPending(ctx, c, cur.ID, seen); err != nil {
			return trainEnd{}, err, true // a failed journal write fails the step; teardown destroys the instance
		}
	}
	return trainEnd{interrupted: fmt.Sprintf("contract ends %s (%s)", ended.End.UTC().Format(time.RFC3339), ended.Why)}, nil, true
}
