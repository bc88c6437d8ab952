package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/report"
	"github.com/vastrun/vastrun/internal/run"
)

// NewCmdReport builds `vastrun report`.
func NewCmdReport(f *Factory) *cobra.Command {
	o := &WorkflowOptions{allowMissingConfigs: true}
	var htmlPath string
	cmd := &cobra.Command{
		Use:   "report [RUN]",
		Short: "Show a run's receipt as text, Markdown, JSON or a self-contained HTML page",
		Long: `Render a run (default: the latest) from its journal and receipt. --html writes
one self-contained page (no network): a state timeline per attempt, spend
accumulating against the budget, checkpoints, the test result and the receipt.`,
		Example: "  vastrun report\n  vastrun report mx1seio0a3dm --html report.html\n  vastrun report --json",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			dir, err := runDir(cfg.StateDir, id)
			if err != nil {
				return &UsageError{Err: err}
			}
			recs, err := journal.Read(dir)
			if err != nil {
				return fmt.Errorf("read run journal: %w", err)
			}
			r, err := loadReceipt(dir, recs)
			if err != nil {
				return err
			}
			switch {
			case htmlPath != "":
				out, err := os.Create(htmlPath)
				if err != nil {
					return err
				}
				defer out.Close()
				if err := report.HTML(out, report.BuildWith(r, recs, reportExtras(r))); err != nil {
					return err
				}
				f.IO.Infof("wrote %s", htmlPath)
				return nil
			case f.JSON:
				enc := json.NewEncoder(f.IO.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			default: // aligned text on a terminal, else Markdown
				return writeSummary(f, r)
			}
		},
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir (optional)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "where run journals live")
	cmd.Flags().StringVar(&htmlPath, "html", "", "write a self-contained HTML report to this file")
	return cmd
}

// loadReceipt reads the run's receipt.json, or, for a run that never
// finished (a killed controller), builds one from the journal.
func loadReceipt(dir string, recs []journal.Record) (*run.Receipt, error) {
	st, err := run.Replay(recs)
	if err != nil {
		return nil, err
	}
	var sf struct {
		EvidenceDir string `json:"evidence_dir"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		json.Unmarshal(b, &sf)
	}
	if sf.EvidenceDir != "" {
		b, err := os.ReadFile(filepath.Join(sf.EvidenceDir, "receipt.json"))
		if err == nil {
			var r run.Receipt
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("receipt %s: %w", filepath.Join(sf.EvidenceDir, "receipt.json"), err)
			}
			return &r, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	r := &run.Receipt{Schema: run.ReceiptSchema, Workflow: st.Workflow, RunID: st.RunID, Label: st.Label, Outcome: st.Outcome,
		Attempts: st.Attempts, StartedAt: st.Started, ManifestSHA256: st.ManifestHash, Timings: map[string]float64{}}
	if r.Outcome == "" {
		r.Outcome = "unfinished"
	}
	if n := len(recs); n > 0 {
		r.FinishedAt = recs[n-1].Time
	}
	r.Cleanup.Unconfirmed = st.Unconfirmed()
	r.Cleanup.Confirmed = len(r.Cleanup.Unconfirmed) == 0
	return r, nil
}
