package cli

import (
	"context"

	"github.com/spf13/cobra"
)

// runCmd is every command's RunE, in gh's shape: fill (nil when the flags
// alone fill opts) turns arguments into options and refuses bad input
// with a UsageError; then opts go to runF when a test gave one, else to
// run. Nothing else belongs in a RunE: whatever a command decides is in
// run, or in a package of its own, where it can be table-tested.
func runCmd[O any](opts *O, fill func(cmd *cobra.Command, args []string) error, runF, run func(context.Context, *O) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if fill != nil {
			if err := fill(cmd, args); err != nil {
				return err
			}
		}
		ctx := cmd.Context()
		if probe, ok := ctx.Value(shapeProbeKey{}).(func(*cobra.Command, any) error); ok {
			return probe(cmd, opts) // shape_test.go: the options, in place of the work
		}
		if runF != nil {
			return runF(ctx, opts)
		}
		return run(ctx, opts)
	}
}

// shapeProbeKey carries the test probe that TestEveryCommandHasTheGhShape
// puts in the command's context: each command built through runCmd hands
// it its options instead of running, so a command whose RunE does its own
// work fails that test.
type shapeProbeKey struct{}
