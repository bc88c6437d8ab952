package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/team"
)

// BudgetOptions are `vastrun budget`'s flags.
type BudgetOptions struct {
	f *Factory
	// Team carries -f, --state and --yes.
	Team WorkflowOptions
	// Period is the month, YYYY-MM (default: this month, UTC).
	Period string
	// SetLimit is the new limit, applied only when SetLimitGiven.
	SetLimit      float64
	SetLimitGiven bool
}

// NewCmdBudget builds `vastrun budget`: the team ledger in the state bucket.
func NewCmdBudget(f *Factory, runF func(context.Context, *BudgetOptions) error) *cobra.Command {
	opts := &BudgetOptions{f: f}
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show the team ledger: the month's limit, reservations made before renting, and spend settled from charges",
		Long: `Show the team ledger kept in the state bucket (state: s3://...). Every run
reserves its worst case under its plan before it is approved; a run whose
reservation would take the month past the limit is refused at approval.
Once a run ended and every rental of it is confirmed destroyed its
reservation is released and it settles to the marketplace's charges, or to
its estimate, marked (estimate), when they cannot be read. --set-limit
changes the month's limit for everyone.`,
		Example: "  vastrun budget --state s3://ml-team/vastrun\n  vastrun budget --set-limit 200 --yes\n  vastrun budget --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(cmd *cobra.Command, _ []string) error {
			if opts.Period == "" {
				opts.Period = team.Period(f.clock().Now())
			} else if _, err := time.Parse("2006-01", opts.Period); err != nil {
				return &UsageError{Err: fmt.Errorf("--period %q: want YYYY-MM", opts.Period), Hint: "for example --period 2026-12; leave it out for this month (UTC)"}
			}
			opts.SetLimitGiven = cmd.Flags().Changed("set-limit")
			if opts.SetLimitGiven {
				if opts.SetLimit < 0 {
					return &UsageError{Err: fmt.Errorf("--set-limit %g: want 0 (no limit) or more", opts.SetLimit), Hint: "give the month's limit in $, e.g. --set-limit 200, or --set-limit 0 for none"}
				}
				if !opts.Team.Yes {
					return &UsageError{Err: fmt.Errorf("changing the team's limit for %s needs --yes", opts.Period), Hint: "re-run with --yes"}
				}
			}
			return nil
		}, runF, runBudget),
	}
	opts.Team.addTeamBucketFlags(cmd, "config file (for state: and team.budget_usd)")
	fl := cmd.Flags()
	fl.StringVar(&opts.Period, "period", "", "the month, YYYY-MM (default: this month, UTC)")
	fl.Float64Var(&opts.SetLimit, "set-limit", 0, "set the month's team limit in $ (0: none); needs --yes")
	fl.BoolVarP(&opts.Team.Yes, "yes", "y", false, "approve changing the limit")
	return cmd
}

func runBudget(ctx context.Context, opts *BudgetOptions) error {
	f, period := opts.f, opts.Period
	cfg, loc, b, err := opts.Team.openTeamBucket(ctx, f, "the team ledger lives in a team bucket", teamStateHint)
	if err != nil {
		return err
	}
	var l *team.Ledger
	if opts.SetLimitGiven {
		if l, err = team.SetLimit(ctx, b, period, opts.SetLimit); err != nil {
			return err
		}
		f.IO.Infof("team budget for %s: limit $%.2f", period, opts.SetLimit)
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
	if _, err := fmt.Fprintf(f.IO.Out, "period %s  limit %s  reserved $%.4f  settled $%.4f\n", period, limit, reserved, settled); err != nil {
		return err
	}
	var tw strings.Builder
	fmt.Fprintln(&tw, "RUN\tWORST CASE\tRESERVED\tSETTLED\tHOLDER")
	for _, id := range l.RunIDs() {
		fmt.Fprintln(&tw, ledgerRow(id, l.Runs[id]))
	}
	return writeTable(f.IO.Out, tw.String())
}

// ledgerRow is one run of the ledger, tab-separated: the worst case it was
// admitted on, the reservation it still holds, and what it settled to,
// marked unless it comes from the charges.
func ledgerRow(id string, r *team.LedgerLine) string {
	settled := "-"
	if r.SettledUSD != nil {
		settled = fmt.Sprintf("$%.4f", *r.SettledUSD)
		if r.Basis != "" && r.Basis != team.BasisCharges {
			settled += " (" + r.Basis + ")"
		}
	}
	return fmt.Sprintf("%s\t$%.4f\t$%.4f\t%s\t%s", id, r.WorstCaseUSD, r.ReservedUSD, settled, dashIfEmpty(r.Holder))
}
