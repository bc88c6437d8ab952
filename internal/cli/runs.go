package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/report"
)

// RunsOptions are the inputs of `vastrun runs`.
type RunsOptions struct {
	f          *Factory
	IO         *IOStreams
	JSON       bool
	ConfigPath string
	StateDir   string
	Now        func() time.Time
	// All lists the team's runs from the state bucket instead (--all;
	// Mine narrows them to this host and user), through Team's flags.
	All, Mine bool
	Team      *WorkflowOptions
}

// NewCmdRuns builds `vastrun runs`; runF replaces the run in tests.
func NewCmdRuns(f *Factory, runF func(context.Context, *RunsOptions) error) *cobra.Command {
	opts := &RunsOptions{f: f, IO: f.IO, Team: &WorkflowOptions{allowMissingConfigs: true}}
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List the state dir's runs, newest first: outcome, time, cost and live instances",
		Long: `List every run in the state dir, newest first: its id, workflow, outcome,
start, wall-clock time, cost (charged when the marketplace reported it, else
estimated from the rented time) and the instances not yet confirmed
destroyed. The latest run (the one status, exec, down and report use by
default) is marked with *. Reads only: no API call is made.

With --all, the team's runs are listed from the state bucket (state:
s3://...): state, workflow, holder, lease freshness, instances and cost.`,
		Example: "  vastrun runs\n  vastrun runs --json | jq '.runs[] | select(.live_instances | length > 0)'\n  vastrun runs --all --state s3://ml-team/vastrun\n  vastrun runs --all --mine --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(*cobra.Command, []string) error {
			opts.JSON = f.JSON
			opts.Now = f.clock().Now
			opts.Team.ConfigPath, opts.Team.StateDir = opts.ConfigPath, opts.StateDir
			return nil
		}, runF, runRuns),
	}
	cmd.Flags().StringVarP(&opts.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir (optional)")
	cmd.Flags().StringVar(&opts.StateDir, "state-dir", "", "where run journals live (default: state_dir in the config, else .vastrun)")
	opts.Team.addTeamFlags(cmd)
	cmd.Flags().BoolVar(&opts.All, "all", false, "list the team's runs from the state bucket (state: s3://...)")
	cmd.Flags().BoolVar(&opts.Mine, "mine", false, "with --all: only runs held or last held from this host by this user")
	return cmd
}

func runRuns(ctx context.Context, opts *RunsOptions) error {
	if opts.All || opts.Mine { // runs_team.go
		return listTeamRuns(ctx, opts.f, opts.Team, opts.Mine)
	}
	wo := &WorkflowOptions{ConfigPath: opts.ConfigPath, StateDir: opts.StateDir, allowMissingConfigs: true}
	cfg, err := wo.loadConfig()
	if err != nil {
		return err
	}
	list, err := report.List(cfg.StateDir, opts.Now())
	if err != nil {
		return fmt.Errorf("list runs in %s: %w", cfg.StateDir, err)
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Schema   string       `json:"schema"`
			StateDir string       `json:"state_dir"`
			Runs     []report.Run `json:"runs"`
		}{report.ListSchema, cfg.StateDir, list})
	}
	if len(list) == 0 {
		opts.IO.Infof("no runs in %s yet: 'vastrun ci' or 'vastrun up' starts one", cfg.StateDir)
		return nil
	}
	var tw strings.Builder
	fmt.Fprintln(&tw, "RUN\tWORKFLOW\tOUTCOME\tSTARTED\tWALL\tCOST\tLIVE")
	for _, r := range list {
		mark := " "
		if r.Latest {
			mark = "*"
		}
		cost := fmt.Sprintf("$%.4f", r.CostUSD)
		if r.CostSource == "estimate" && r.CostUSD > 0 {
			cost = "~" + cost
		}
		live := "-"
		if len(r.LiveInstances) > 0 {
			ids := make([]string, len(r.LiveInstances))
			for i, id := range r.LiveInstances {
				ids[i] = fmt.Sprint(id)
			}
			live = strings.Join(ids, ",")
		}
		started := "-"
		if !r.StartedAt.IsZero() {
			started = r.StartedAt.Local().Format("2006-01-02 15:04:05")
		}
		outcome := r.Outcome
		if r.Error != "" {
			outcome += " (" + r.Error + ")"
		}
		fmt.Fprintf(&tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, r.RunID, r.Workflow, outcome, started, wall(r.WallSeconds), cost, live)
	}
	if err := writeTable(opts.IO.Out, tw.String()); err != nil {
		return err
	}
	opts.IO.Infof("* latest run; ~ estimated cost; LIVE: instances not confirmed destroyed (vastrun down --run RUN)")
	return nil
}

// wall renders seconds the way people read a duration: 4.2s, 3m05s, 1h02m.
func wall(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", s)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
