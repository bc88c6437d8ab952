package preflight

import (
	"errors"

	"github.com/vastrun/vastrun/internal/agent"
)

// AgentBinary refuses a vastrun that instances could not run (see
// agent.CheckBinary): every rental has it copied to the instance as its
// dead-man switch, which would fail only after the rental is paid for.
// fromEnv says the path came from agent.BinaryEnv.
func AgentBinary(path string, fromEnv bool) error {
	err := agent.CheckBinary(path)
	var be *agent.BinaryError
	if !errors.As(err, &be) {
		return err
	}
	field := "vastrun (this executable)"
	if fromEnv {
		field = agent.BinaryEnv
	}
	return &Error{Problems: []Problem{{Field: field, Value: path, What: be.Problem + ": every instance runs it as its dead-man switch, in any image, so it must be a static linux/amd64 executable", Fix: agent.BinaryFix}}}
}
