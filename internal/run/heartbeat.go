package run

import (
	"context"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// heartbeat is the controller's side of the agent's dead-man switch: a call
// of its own (`agent heartbeat --json`) on its own schedule, a third of the
// TTL, so two beats can fail before the agent gives up on the controller.
// It is not a side effect of the status poll: a status that fails to build
// or decode does not starve the switch, and a beat that fails is logged and
// tried again on the next pass (the client redials).
//
// The beat runs in the monitor loop, not in a goroutine: the loop is the
// one place that waits on the run's clock, which keeps a fake clock
// deterministic in tests and a scaled one honest under --sim.
type heartbeat struct {
	every time.Duration // 0: the agent has no TTL, nothing to beat
	last  time.Time
}

func newHeartbeat(ttl time.Duration) *heartbeat {
	if ttl <= 0 {
		return &heartbeat{every: time.Duration(1<<63 - 1)}
	}
	return &heartbeat{every: max(ttl/3, minTrainPoll)}
}

// beatIfDue touches the heartbeat when a beat is due.
func (e *Engine) beatIfDue(ctx context.Context, c *remote.Client, inst provider.InstanceID, hb *heartbeat) {
	if hb.every == time.Duration(1<<63-1) || (!hb.last.IsZero() && e.now().Sub(hb.last) < hb.every) {
		return
	}
	b, err := e.agentJSON(ctx, c, nil, "heartbeat --json")
	if err == nil {
		_, err = agent.DecodeHeartbeat(b)
	}
	if err != nil {
		e.Log.Debug("heartbeat failed; trying again on the next pass", "instance", inst, "err", err)
		return
	}
	hb.last = e.now()
}
