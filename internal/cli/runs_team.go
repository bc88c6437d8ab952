package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// TeamRunsSchema names the JSON of `vastrun runs --all`.
const TeamRunsSchema = "vastrun.team.runs"

// listTeamRuns prints the team's runs from the bucket.
func listTeamRuns(ctx context.Context, f *Factory, o *WorkflowOptions, mine bool) error {
	_, loc, b, err := o.openTeamBucket(ctx, f, "runs --all lists a team bucket", teamStateHint)
	if err != nil {
		return err
	}
	rows, err := team.List(ctx, b)
	if err != nil {
		return fmt.Errorf("list runs in %s: %w", loc, err)
	}
	if mine {
		rows = team.HeldFrom(rows, teamstate.ThisProcess(f.Getenv))
	}
	if f.JSON {
		if rows == nil {
			rows = []team.Row{}
		}
		enc := json.NewEncoder(f.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"schema": TeamRunsSchema, "v": 1, "state": loc.String(), "runs": rows})
	}
	var tw strings.Builder
	fmt.Fprintln(&tw, "RUN\tWORKFLOW\tSTATE\tHOLDER\tLEASE\tINSTANCES\t$/H\tCOST")
	for _, r := range rows {
		lease := r.Lease
		if r.Lease == team.LeaseLive {
			lease = fmt.Sprintf("live %.0fs", r.LeaseLeftS)
		}
		holder := "-"
		if r.Holder.Host != "" {
			holder = r.Holder.String()
		}
		var inst []string
		for _, id := range r.Live {
			inst = append(inst, fmt.Sprint(id))
		}
		live := strings.Join(inst, ",")
		if live == "" {
			live = "-"
		}
		fmt.Fprintf(&tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t$%.4f\n", r.RunID, dashIfEmpty(r.Workflow), r.State, holder, lease, live, r.DPH, r.CostUSD)
	}
	return writeTable(f.IO.Out, tw.String())
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
