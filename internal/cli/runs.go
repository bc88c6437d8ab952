package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/run"
)

// NewCmdRuns builds `vastrun runs`: this machine's runs from the state
// directory, or with --all the team's from the state bucket (runs_team.go).
// (A minimal local listing; the richer one is issue 12's.)
func NewCmdRuns(f *Factory) *cobra.Command {
	o := &WorkflowOptions{allowMissingConfigs: true}
	var all, mine bool
	cmd := &cobra.Command{
		Use:     "runs",
		Short:   "List runs: this machine's, or with --all the team's from the state bucket",
		Example: "  vastrun runs\n  vastrun runs --all --state s3://ml-team/vastrun\n  vastrun runs --all --mine --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all || mine {
				return listTeamRuns(cmd.Context(), f, o, mine)
			}
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			dirs, _ := filepath.Glob(filepath.Join(cfg.StateDir, "runs", "*"))
			sort.Strings(dirs)
			type row struct {
				RunID     string  `json:"run_id"`
				Workflow  string  `json:"workflow"`
				Outcome   string  `json:"outcome"`
				Instances []int64 `json:"instance_ids"`
			}
			rows := []row{}
			for _, d := range dirs {
				if _, err := os.Stat(filepath.Join(d, "journal.jsonl")); err != nil {
					continue
				}
				st, err := run.LoadState(d)
				if err != nil || st.RunID == "" {
					continue
				}
				r := row{RunID: st.RunID, Workflow: st.Workflow, Outcome: string(st.Outcome), Instances: []int64{}}
				for _, id := range st.Instances() {
					r.Instances = append(r.Instances, int64(id))
				}
				rows = append(rows, r)
			}
			if f.JSON {
				return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.runs", "v": 1, "runs": rows})
			}
			tw := tabwriter.NewWriter(f.IO.Out, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tWORKFLOW\tOUTCOME\tINSTANCES")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", r.RunID, r.Workflow, dashIfEmpty(r.Outcome), r.Instances)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file (for state: and state_dir:)")
	fl.StringVar(&o.StateDir, "state-dir", "", "where run journals live (default: state_dir in the config, else .vastrun)")
	o.addTeamFlags(cmd)
	fl.BoolVar(&all, "all", false, "list the team's runs from the state bucket (state: s3://...)")
	fl.BoolVar(&mine, "mine", false, "with --all: only runs held or last held from this host by this user")
	return cmd
}
