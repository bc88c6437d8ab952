package train

import (
	"context"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/spec"
)

// startHeartbeat beats the agent's dead-man switch over its own channel
// (agent heartbeat --serve, one session on c's connection) every TTL/3
// until the returned stop is called. The status polls no longer touch the
// heartbeat: a slow or failed poll cannot make the controller look dead,
// and a dropped connection costs one redial of c, shared by both.
//
// The beats run on the wall clock whatever the engine's clock is: the agent
// checks the TTL on the instance's own clock, which --sim does not scale.
func (e *flow) startHeartbeat(ctx context.Context, c *remote.Client) (stop func()) {
	ttl := spec.ParseDuration(e.trainSpec().HeartbeatTTL)
	if ttl <= 0 { // the agent's switch is off: nothing to keep alive
		return func() {}
	}
	every := max(ttl/3, 100*time.Millisecond)
	var inst provider.InstanceID // for the errors only
	if a := e.s.State().Current(); a != nil {
		inst = a.InstanceID
	}
	ac := e.agentOn(c, inst)
	h := &agent.Heartbeater{
		Every: every,
		Clock: clock.Real{},
		Open: func(ctx context.Context) (agent.HeartbeatPipe, error) {
			return ac.OpenHeartbeat(ctx, c)
		},
		Logf: func(format string, args ...any) {
			e.s.Log.Debug("heartbeat", "detail", e.s.Redactor.String(fmt.Sprintf(format, args...)))
		},
	}
	h.Start(ctx)
	return func() {
		st := h.Stop()
		e.s.Log.Debug("heartbeat stopped", "beats", st.Beats, "failed", st.Failed, "sessions", st.Sessions)
		if err := h.Err(); err != nil {
			e.s.Infof("the agent's heartbeat channel speaks another protocol: %v", err)
		}
	}
}
