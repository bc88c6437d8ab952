package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/storage"
)

// CheckpointOptions configure the hidden `vastrun checkpoint` commands.
type CheckpointOptions struct {
	f     *Factory
	Store string
	Dir   string
	Step  int64
}

// NewCmdCheckpoint builds `vastrun checkpoint commit|restore`: the agent's
// commit and restore paths as one process each, so scripts/bench-storage.sh
// can time them against other S3 copiers as whole processes. Hidden: a
// developer tool, documented in docs/performance.md.
func NewCmdCheckpoint(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "checkpoint",
		Short:  "Commit or restore one checkpoint directory (developer tool; see docs/performance.md)",
		Hidden: true,
	}
	cmd.AddCommand(NewCmdCheckpointCommit(f, nil), NewCmdCheckpointRestore(f, nil))
	return cmd
}

// NewCmdCheckpointCommit builds `vastrun checkpoint commit`.
func NewCmdCheckpointCommit(f *Factory, runF func(context.Context, *CheckpointOptions) error) *cobra.Command {
	opts := &CheckpointOptions{f: f}
	cmd := &cobra.Command{
		Use:   "commit",
		Short: "Upload --dir as the checkpoint for --step and commit it",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runCheckpointCommit),
	}
	opts.addFlags(cmd)
	return cmd
}

// NewCmdCheckpointRestore builds `vastrun checkpoint restore`.
func NewCmdCheckpointRestore(f *Factory, runF func(context.Context, *CheckpointOptions) error) *cobra.Command {
	opts := &CheckpointOptions{f: f}
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore the checkpoint of --step into --dir, verifying every file's SHA-256",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runCheckpointRestore),
	}
	opts.addFlags(cmd)
	return cmd
}

func (o *CheckpointOptions) addFlags(c *cobra.Command) {
	c.Flags().StringVar(&o.Store, "store", "", "checkpoint store URI (s3://bucket/prefix or file:///path)")
	c.Flags().StringVar(&o.Dir, "dir", "", "checkpoint directory (restore: replaced)")
	c.Flags().Int64Var(&o.Step, "step", 0, "checkpoint step")
	// Both flags are defined above: MarkFlagRequired fails only for a
	// name no flag has, a mistake here that every test of these commands
	// would show.
	for _, name := range []string{"store", "dir"} {
		if err := c.MarkFlagRequired(name); err != nil {
			panic(err)
		}
	}
}

func (o *CheckpointOptions) open() (checkpoint.Store, error) {
	s, err := storage.Open(o.Store, storage.Options{Getenv: o.f.Getenv})
	if err != nil {
		return checkpoint.Store{}, &UsageError{Err: err, Hint: "--store takes s3://BUCKET/PREFIX or file:///absolute/path"}
	}
	return checkpoint.Store{S: s}, nil
}

func runCheckpointCommit(ctx context.Context, o *CheckpointOptions) error {
	transferGC(o.f.Getenv)
	cs, err := o.open()
	if err != nil {
		return err
	}
	cm, err := cs.Commit(ctx, o.Dir, o.Step, o.f.clock().Now())
	if err != nil {
		return err
	}
	return writeTransfer(o.f, cm)
}

func runCheckpointRestore(ctx context.Context, o *CheckpointOptions) error {
	transferGC(o.f.Getenv)
	cs, err := o.open()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(o.Dir)), 0o755); err != nil {
		return err
	}
	cm, err := cs.Restore(ctx, o.Step, o.Dir)
	if err != nil {
		return err
	}
	return writeTransfer(o.f, cm)
}

// writeTransfer prints one transfer's result (vastrun.checkpoint-transfer/v1).
func writeTransfer(f *Factory, cm checkpoint.Committed) error {
	return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.checkpoint-transfer/v1",
		"step": cm.Step, "manifest_sha256": cm.ManifestSHA256, "files": len(cm.Manifest.Files)})
}
