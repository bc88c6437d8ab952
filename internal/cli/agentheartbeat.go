package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/agent"
)

// AgentHeartbeatOptions are the inputs of `agent heartbeat`.
type AgentHeartbeatOptions struct {
	f     *Factory
	Serve bool
}

// NewCmdAgentHeartbeat is `agent heartbeat --serve`: the controller's
// heartbeat channel (agent/heartbeat.go). One long-lived session per SSH
// connection reads a JSON request a line on stdin and answers a line on
// stdout, touching the heartbeat for each; a beat costs no new process.
// Without --serve it touches once and prints that beat's answer.
func NewCmdAgentHeartbeat(f *Factory, runF func(context.Context, *AgentHeartbeatOptions) error) *cobra.Command {
	opts := &AgentHeartbeatOptions{f: f}
	c := &cobra.Command{
		Use:   "heartbeat",
		Short: "Touch the controller's heartbeat; with --serve, once per JSON request line on stdin (schema vastrun.agent.heartbeat v1)",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runAgentHeartbeat),
	}
	c.Flags().BoolVar(&opts.Serve, "serve", false, "answer heartbeat requests on stdin until it ends")
	alwaysJSON(c)
	return c
}

func runAgentHeartbeat(_ context.Context, opts *AgentHeartbeatOptions) error {
	f := opts.f
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	if opts.Serve {
		return agent.ServeHeartbeat(l, f.IO.In, f.IO.Out, f.clock())
	}
	req, _ := json.Marshal(agent.NewHeartbeatRequest(0))
	a, _ := agent.Beat(l, req, f.clock().Now())
	if err := json.NewEncoder(f.IO.Out).Encode(a); err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("agent heartbeat: %v", a.Errors)
	}
	return nil
}
