package cli

import (
	"context"
	"errors"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/sweep"
)

// SweepOptions are `vastrun sweep`'s flags.
type SweepOptions struct {
	f *Factory
	// Workflow carries --yes, --evidence-dir, --state-dir and --state; its
	// ConfigPath is the sweep file's config:.
	Workflow  WorkflowOptions
	SweepPath string
}

// NewCmdSweep builds `vastrun sweep`.
func NewCmdSweep(f *Factory, runF func(context.Context, *SweepOptions) error) *cobra.Command {
	opts := &SweepOptions{f: f}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Run one training (or ci) run per point of a parameter grid, with a concurrency limit and one budget",
		Long: `Run every combination of sweep.yaml's grid as a run of its own (its own run
id, label, lease, checkpoint prefix, journal and receipt), at most
concurrency at once, with the grid's values as environment variables of the
workload. One budget covers them all: each run reserves its worst case at
approval, and a run that would pass budget_usd is refused there. Each run
survives and is cleaned up exactly as a single run would be; one combined
receipt lists them (evidence dir: sweep-receipt.json).

  config: train.yaml
  concurrency: 3
  budget_usd: 20
  grid:
    LR: ["0.1", "0.01"]
    SEED: ["1", "2", "3"]`,
		Example: "  vastrun sweep --yes -f sweep.yaml\n  vastrun sweep --sim --yes -f sweep.yaml --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE:    runCmd(opts, nil, runF, runSweep),
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.SweepPath, "file", "f", "sweep.yaml", "the sweep file")
	fl.BoolVarP(&o.Yes, "yes", "y", false, "approve renting without a prompt")
	fl.StringVar(&o.EvidenceDir, "evidence-dir", "", "where to write evidence (each run in DIR/<point>; default ./vastrun-evidence/RUN)")
	fl.StringVar(&o.StateDir, "state-dir", "", "where run journals live (default: state_dir in the config, else .vastrun)")
	o.addTeamFlags(cmd)
	return cmd
}

func runSweep(ctx context.Context, opts *SweepOptions) error {
	f, o := opts.f, &opts.Workflow
	sw, err := sweep.Load(opts.SweepPath)
	if errors.Is(err, fs.ErrNotExist) {
		return &UsageError{Err: err, Hint: "write a sweep.yaml: config, concurrency, budget_usd and grid (see 'vastrun sweep --help')"}
	}
	if err != nil {
		return &UsageError{Err: err}
	}
	o.ConfigPath = sw.Config
	base, err := o.loadConfig()
	if err != nil {
		return err
	}
	if ok, err := checkTrust(f, o, cienv.Detect(f.Getenv)); !ok || err != nil {
		return err
	}
	workflow := "ci"
	if base.IsTrain() {
		workflow = "train"
	}
	var specs []childSpec
	for _, p := range sw.Points() {
		c, err := config.Load(sw.Config)
		if err != nil {
			return err
		}
		if o.StateDir != "" {
			c.StateDir = o.StateDir
		}
		if c.Env == nil {
			c.Env = map[string]string{}
		}
		for k, v := range p {
			c.Env[k] = v
		}
		specs = append(specs, childSpec{Name: sweep.PointName(p), Cfg: c, Params: p})
	}
	if _, err := checkBeforeRenting(ctx, f, base, workflow); err != nil {
		return err
	}
	mr, runErr := runMany(ctx, f, o, "sweep", workflow, specs, sw.Concurrency, sw.BudgetUSD, "all")
	if mr == nil {
		return runErr
	}
	if err := writeManyReceipt(f, o, base, mr); err != nil && runErr == nil {
		return err
	}
	return runErr
}
