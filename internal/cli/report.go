package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/report"
)

// ReportOptions are `vastrun report`'s flags and argument.
type ReportOptions struct {
	f *Factory
	// Workflow carries -f and --state-dir (where the run is found).
	Workflow WorkflowOptions
	RunID    string
	HTMLPath string
}

// NewCmdReport builds `vastrun report`.
func NewCmdReport(f *Factory, runF func(context.Context, *ReportOptions) error) *cobra.Command {
	opts := &ReportOptions{f: f, Workflow: WorkflowOptions{allowMissingConfigs: true}}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "report [RUN]",
		Short: "Show a run's receipt as text, Markdown, JSON or a self-contained HTML page",
		Long: `Render a run (default: the latest) from its journal and receipt. --html writes
one self-contained page (no network): a state timeline per attempt, spend
accumulating against the budget, checkpoints, the test result and the receipt.`,
		Example: "  vastrun report\n  vastrun report mx1seio0a3dm --html report.html\n  vastrun report --json",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: runCmd(opts, func(_ *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.RunID = args[0]
			}
			return nil
		}, runF, runReport),
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir (optional)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "where run journals live")
	cmd.Flags().StringVar(&opts.HTMLPath, "html", "", "write a self-contained HTML report to this file")
	return cmd
}

func runReport(_ context.Context, opts *ReportOptions) error {
	f := opts.f
	cfg, err := opts.Workflow.loadConfig()
	if err != nil {
		return err
	}
	dir, err := runDir(cfg.StateDir, opts.RunID)
	if err != nil {
		return &UsageError{Err: err}
	}
	recs, err := journal.Read(dir)
	if err != nil {
		return fmt.Errorf("read run journal: %w", err)
	}
	r, err := report.Receipt(dir, recs)
	if err != nil {
		return err
	}
	switch {
	case opts.HTMLPath != "":
		out, err := f.sink(cfg).Create(opts.HTMLPath, 0o644)
		if err != nil {
			return err
		}
		if err := report.HTML(out, report.BuildWith(r, recs, reportExtras(r))); err != nil {
			_ = out.Close() // the render's error is the one to report
			return err
		}
		// Close writes the last lines and syncs: the report is whole only then.
		if err := out.Close(); err != nil {
			return err
		}
		f.IO.Infof("wrote %s", opts.HTMLPath)
		return nil
	case f.JSON:
		enc := json.NewEncoder(f.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	default: // aligned text on a terminal, else Markdown
		return writeSummary(f, r)
	}
}
