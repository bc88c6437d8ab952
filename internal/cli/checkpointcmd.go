package cli

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/storage"
)

// CheckpointOptions configure the hidden `vastrun checkpoint` commands.
type CheckpointOptions struct {
	Store string
	Dir   string
	Step  int64
}

// newCmdCheckpoint builds `vastrun checkpoint commit|restore`: the agent's
// commit and restore paths as one process each, so scripts/bench-storage.sh
// can time them against other S3 copiers as whole processes. Hidden: a
// developer tool, documented in docs/performance.md.
func newCmdCheckpoint(f *Factory) *cobra.Command {
	o := &CheckpointOptions{}
	cmd := &cobra.Command{
		Use:    "checkpoint",
		Short:  "Commit or restore one checkpoint directory (developer tool; see docs/performance.md)",
		Hidden: true,
	}
	open := func() (checkpoint.Store, error) {
		s, err := storage.Open(o.Store, storage.Options{Getenv: f.Getenv})
		if err != nil {
			return checkpoint.Store{}, &UsageError{Err: err, Hint: "--store takes s3://BUCKET/PREFIX or file:///absolute/path"}
		}
		return checkpoint.Store{S: s}, nil
	}
	commit := &cobra.Command{
		Use:   "commit",
		Short: "Upload --dir as the checkpoint for --step and commit it",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := open()
			if err != nil {
				return err
			}
			cm, err := cs.Commit(cmd.Context(), o.Dir, o.Step, f.clock().Now())
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.checkpoint-transfer/v1",
				"step": cm.Step, "manifest_sha256": cm.ManifestSHA256, "files": len(cm.Manifest.Files)})
		},
	}
	restore := &cobra.Command{
		Use:   "restore",
		Short: "Restore the checkpoint of --step into --dir, verifying every file's SHA-256",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := open()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Clean(o.Dir)), 0o755); err != nil {
				return err
			}
			cm, err := cs.Restore(cmd.Context(), o.Step, o.Dir)
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.checkpoint-transfer/v1",
				"step": cm.Step, "manifest_sha256": cm.ManifestSHA256, "files": len(cm.Manifest.Files)})
		},
	}
	for _, c := range []*cobra.Command{commit, restore} {
		c.Flags().StringVar(&o.Store, "store", "", "checkpoint store URI (s3://bucket/prefix or file:///path)")
		c.Flags().StringVar(&o.Dir, "dir", "", "checkpoint directory (restore: replaced)")
		c.Flags().Int64Var(&o.Step, "step", 0, "checkpoint step")
		c.MarkFlagRequired("store")
		c.MarkFlagRequired("dir")
	}
	cmd.AddCommand(commit, restore)
	return cmd
}
