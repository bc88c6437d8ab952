package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/team"
)

// NewCmdBudget builds `vastrun budget`: the team ledger in the state bucket.
func NewCmdBudget(f *Factory) *cobra.Command {
	o := &WorkflowOptions{allowMissingConfigs: true}
	var period string
	var setLimit float64
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show the team ledger: the month's limit, reservations made before renting, and spend settled from charges",
		Long: `Show the team ledger kept in the state bucket (state: s3://...). Every run
reserves its worst case under its plan before it is approved; a run whose
reservation would take the month past the limit is refused at approval.
When a run ends its reservation is replaced by the spend settled from the
marketplace's charges. --set-limit changes the month's limit for everyone.`,
		Example: "  vastrun budget --state s3://ml-team/vastrun\n  vastrun budget --set-limit 200 --yes\n  vastrun budget --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			loc, err := stateLocation(o, cfg)
			if err != nil {
				return err
			}
			if loc.Kind != "s3" {
				return &UsageError{Err: fmt.Errorf("the team ledger lives in a team bucket, and the state is local"), Hint: "pass --state s3://BUCKET/PREFIX, or set state: in the config (docs/teams.md)"}
			}
			if period == "" {
				period = team.Period(time.Now())
			} else if _, err := time.Parse("2006-01", period); err != nil {
				return &UsageError{Err: fmt.Errorf("--period %q: want YYYY-MM", period)}
			}
			b, err := openTeamBackend(ctx, f, loc)
			if err != nil {
				return err
			}
			var l *team.Ledger
			if cmd.Flags().Changed("set-limit") {
				if setLimit < 0 {
					return &UsageError{Err: fmt.Errorf("--set-limit %g: want 0 (no limit) or more", setLimit)}
				}
				if !o.Yes {
					return &UsageError{Err: fmt.Errorf("changing the team's limit for %s needs --yes", period), Hint: "re-run with --yes"}
				}
				if l, err = team.SetLimit(ctx, b, period, setLimit); err != nil {
					return err
				}
				f.IO.Infof("team budget for %s: limit $%.2f", period, setLimit)
			} else if l, _, err = team.ReadLedger(ctx, b, period); err != nil {
				return err
			}
			if l.LimitUSD == 0 {
				l.LimitUSD = cfg.Team.BudgetUSD
			}
			reserved, settled, committed := l.Totals()
			if f.JSON {
				enc := json.NewEncoder(f.IO.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"schema": "vastrun.team.budget", "v": 1, "state": loc.String(), "period": period,
					"limit_usd": l.LimitUSD, "reserved_usd": reserved, "settled_usd": settled, "committed_usd": committed, "runs": l.Runs})
			}
			limit := "none"
			if l.LimitUSD > 0 {
				limit = fmt.Sprintf("$%.2f (left $%.4f)", l.LimitUSD, l.LimitUSD-committed)
			}
			fmt.Fprintf(f.IO.Out, "period %s  limit %s  reserved $%.4f  settled $%.4f\n", period, limit, reserved, settled)
			tw := tabwriter.NewWriter(f.IO.Out, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tRESERVED\tSETTLED\tHOLDER")
			for _, id := range l.RunIDs() {
				r := l.Runs[id]
				s := "-"
				if r.SettledUSD != nil {
					s = fmt.Sprintf("$%.4f", *r.SettledUSD)
				}
				fmt.Fprintf(tw, "%s\t$%.4f\t%s\t%s\n", id, r.ReservedUSD, s, r.Holder)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file (for state: and team.budget_usd)")
	o.addTeamFlags(cmd)
	fl.StringVar(&period, "period", "", "the month, YYYY-MM (default: this month, UTC)")
	fl.Float64Var(&setLimit, "set-limit", 0, "set the month's team limit in $ (0: none); needs --yes")
	fl.BoolVarP(&o.Yes, "yes", "y", false, "approve changing the limit")
	return cmd
}
