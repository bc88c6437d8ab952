package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// splitCommands work on instances that outlive the command: with --sim
// the embedded simulator, and every instance in it, ends with the process,
// so the next command would find nothing — or, worse, a fresh simulator
// that truthfully reports the instance absent, which down would take for
// a confirmed destruction. They refuse --sim and point to `sim serve`.
var splitCommands = map[string]bool{"up": true, "exec": true, "down": true, "status": true, "ssh": true}

// ErrSimAcrossProcesses means a command that needs instances from another
// process was given --sim.
var ErrSimAcrossProcesses = errors.New("the embedded simulator lives only as long as one command")

// guardSimSplit installs the --sim refusal on the split-job commands.
func guardSimSplit(root *cobra.Command, f *Factory) {
	for _, c := range root.Commands() {
		if !splitCommands[c.Name()] || c.PreRunE != nil {
			continue
		}
		name := c.Name()
		c.PreRunE = func(cmd *cobra.Command, args []string) error {
			if name == "ssh" && f.JSON {
				return &UsageError{Err: errors.New("vastrun ssh --json: ssh's stdout is the remote program's own"), Hint: "for a JSON result run 'vastrun exec --json -- COMMAND' (vastrun.exec/v1, docs/json.md)"}
			}
			if !f.Sim {
				return nil
			}
			return &UsageError{
				Err:  fmt.Errorf("vastrun %s --sim: %w, so its instances are gone before the next 'vastrun exec' or 'vastrun down' can reach them", name, ErrSimAcrossProcesses),
				Hint: "for a split flow offline, run a simulator that outlives each command: 'vastrun sim serve --listen 127.0.0.1:8080' prints VAST_URL and VAST_API_KEY to export; then run up, exec, status and down without --sim (or use 'vastrun ci --sim' for the whole flow in one process)",
			}
		}
	}
}
