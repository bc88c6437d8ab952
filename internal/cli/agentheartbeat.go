package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/agent"
)

// AgentHeartbeatOptions are the inputs of `agent heartbeat`.
type AgentHeartbeatOptions struct {
	IO    *IOStreams
	Serve bool
}

// newAgentHeartbeatCmd is `agent heartbeat --serve`: the controller's
// heartbeat channel (agent/heartbeat.go). One long-lived session per SSH
// connection reads a JSON request a line on stdin and answers a line on
// stdout, touching the heartbeat for each; a beat costs no new process.
// Without --serve it touches once and prints that beat's answer.
func newAgentHeartbeatCmd(f *Factory, runF func(*AgentHeartbeatOptions) error) *cobra.Command {
	opts := &AgentHeartbeatOptions{IO: f.IO}
	var asJSON bool
	c := &cobra.Command{
		Use:   "heartbeat",
		Short: "Touch the controller's heartbeat; with --serve, once per JSON request line on stdin (schema vastrun.agent.heartbeat v1)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runAgentHeartbeat(f, opts)
		},
	}
	c.Flags().BoolVar(&opts.Serve, "serve", false, "answer heartbeat requests on stdin until it ends")
	c.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")
	return c
}

func runAgentHeartbeat(f *Factory, opts *AgentHeartbeatOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	if opts.Serve {
		return agent.ServeHeartbeat(l, opts.IO.In, opts.IO.Out, f.clock())
	}
	req, _ := json.Marshal(agent.NewHeartbeatRequest(0))
	a, _ := agent.Beat(l, req, f.clock().Now())
	if err := json.NewEncoder(opts.IO.Out).Encode(a); err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("agent heartbeat: %v", a.Errors)
	}
	return nil
}
