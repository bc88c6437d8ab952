package cli

import (
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/agent"
)

// newAgentRetireCmd is `agent retire-lost`: after an outbid interruptible
// instance resumed, the workload its stop killed is set aside so that the
// controller can start it again from the last committed checkpoint.
func newAgentRetireCmd(f *Factory) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "retire-lost",
		Short: "Set aside the record of a workload killed with its instance (never one alive or supervised)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			res, err := agent.RetireLost(l, time.Now())
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(res)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")
	return c
}
