package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/ci"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/run"
	"github.com/vastrun/vastrun/internal/storage"
)

// storageVars are the settings and credentials handed to the agent and the
// workload for the checkpoint store. The Vast key is never among them.
var storageVars = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
	"AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_S3_FORCE_PATH_STYLE", "AWS_PROFILE"}

func trainEngine(ctx context.Context, f *Factory, o *WorkflowOptions) (*run.Engine, error) {
	cfg, err := o.loadConfig()
	if err != nil {
		return nil, err
	}
	if !cfg.IsTrain() {
		return nil, &UsageError{Err: fmt.Errorf("%s has no train.command", o.ConfigPath), Hint: "see examples/train/train.yaml and docs/config.md"}
	}
	e, err := newEngine(ctx, f, o, cfg, ci.Detect(f.Getenv))
	if err != nil {
		return nil, err
	}
	// ${VAR} in the store URIs comes from vastrun's environment (${PWD}:
	// the working directory), so configs need no machine paths.
	expand := func(uri string) string {
		return os.Expand(uri, func(k string) string {
			if k == "PWD" {
				if wd, err := os.Getwd(); err == nil {
					return wd
				}
			}
			return f.Getenv(k)
		})
	}
	cfg.Train.CheckpointURI, cfg.Train.OutputURI = expand(cfg.Train.CheckpointURI), expand(cfg.Train.OutputURI)
	if _, err := storage.Open(cfg.Train.CheckpointURI, storage.Options{Getenv: f.Getenv}); err != nil {
		return nil, &UsageError{Err: fmt.Errorf("train.checkpoint_uri: %w", err)}
	}
	e.StorageEnv = map[string]string{}
	for _, k := range storageVars {
		if v := f.Getenv(k); v != "" {
			e.StorageEnv[k] = v
		}
	}
	if c, ok := f.market.(*vast.Client); ok {
		e.APIURL = c.BaseURL()
	}
	return e, nil
}

// NewCmdTrain builds `vastrun train`.
func NewCmdTrain(f *Factory) *cobra.Command {
	o := &WorkflowOptions{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Run a checkpointed training job that survives interruptions",
		Long: `Run train.command on one rented instance with the vastrun agent beside it.
The workload writes checkpoints into $VASTRUN_CHECKPOINT_DIR/STEP/ and marks
each complete with a .complete file; the agent uploads it with SHA-256s and
commits it (manifest, then a conditional COMMITTED marker). When the instance
is interrupted (paused/outbid, exited, offline, gone), vastrun destroys it,
rents a replacement on a different machine, restores the last committed
checkpoint that verifies, and restarts the workload with VASTRUN_RESUME_STEP.
A budget kill switch stops the run with its last checkpoint before
budget.max_spend is passed; the agent destroys its own instance if this
controller dies (heartbeat TTL). See docs/train.md.`,
		Example: `  vastrun train --sim --yes -f examples/train/train.yaml
  vastrun train --yes -f train.yaml --evidence-dir out/
  vastrun resume RUN_ID --yes -f train.yaml`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			e, err := trainEngine(ctx, f, o)
			if err != nil {
				return err
			}
			if _, err := checkBeforeRenting(ctx, f, e.Config, "train"); err != nil {
				return err
			}
			r, runErr := e.RunTrain(ctx)
			return reportRun(f, r, withRunHints(f, o, runErr))
		},
	}
	o.addFlags(cmd, true)
	return cmd
}

// NewCmdResume builds `vastrun resume`.
func NewCmdResume(f *Factory) *cobra.Command {
	o := &WorkflowOptions{}
	var acceptChange bool
	cmd := &cobra.Command{
		Use:   "resume [RUN]",
		Short: "Continue a training or ci run whose controller died, from its journal",
		Long: `Continue a training or ci run from its journal. If its instance is still running,
vastrun re-attaches to it (no second rental); if it is gone or paused, vastrun
destroys what is left and continues on a replacement from the last committed
checkpoint. The run's frozen manifest (checked against the journal's hash)
must match the configuration given: a changed field is refused by name,
unless --accept-config-change.`,
		Example: "  vastrun resume --yes -f train.yaml              # the latest run\n  vastrun resume mx1seio0a3dm --yes -f train.yaml",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
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
				return &UsageError{Err: err, Hint: "the run id is in the receipt, GITHUB_OUTPUT, or " + filepath.Join(cfg.StateDir, "current")}
			}
			st, err := run.LoadState(dir)
			if err != nil {
				return err
			}
			var e *run.Engine
			resume := (*run.Engine).ResumeTrain
			switch st.Workflow {
			case "train":
				e, err = trainEngine(ctx, f, o)
			case "ci":
				e, err = newEngine(ctx, f, o, cfg, ci.Detect(f.Getenv))
				resume = (*run.Engine).ResumeCI
			default:
				return &UsageError{Err: fmt.Errorf("run %s is a %q run; resume continues train and ci runs", st.RunID, st.Workflow), Hint: "tear it down with: vastrun down --run " + st.RunID}
			}
			if err != nil {
				return err
			}
			if err := e.Open(dir); err != nil {
				return err
			}
			e.AcceptConfigChange = acceptChange
			r, runErr := resume(e, ctx)
			var cc *run.ConfigChangedError
			if errors.As(runErr, &cc) {
				return &UsageError{Err: runErr, Hint: fmt.Sprintf("resume with the configuration the run was started with (%s), or pass --accept-config-change to go on with the new one (journaled)", filepath.Join(dir, "manifest.json"))}
			}
			return reportRun(f, r, runErr)
		},
	}
	o.addFlags(cmd, true)
	cmd.Flags().BoolVar(&acceptChange, "accept-config-change", false, "go on although the configuration differs from the run's frozen manifest (the change is journaled)")
	return cmd
}

// NewCmdAgent builds `vastrun agent`, which runs on the instance.
func NewCmdAgent(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "The on-instance helper for training runs (started by vastrun train)",
		Long: `Runs on a training instance. Storage credentials come from the standard AWS
variables in its environment; the dead-man switch destroys this instance
with CONTAINER_API_KEY and CONTAINER_ID against VASTRUN_API_URL.`,
	}
	var store, dir string
	openStore := func() (checkpoint.Store, error) {
		s, err := storage.Open(store, storage.Options{Getenv: f.Getenv})
		if err != nil {
			return checkpoint.Store{}, &UsageError{Err: err}
		}
		return checkpoint.Store{S: s}, nil
	}
	var keep int
	var hb, status, deadline string
	var ttl, poll, quiet time.Duration
	var once bool
	watch := &cobra.Command{
		Use:   "watch",
		Short: "Commit complete checkpoints as they appear; destroy this instance if the controller's heartbeat lapses",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := openStore()
			if err != nil {
				return err
			}
			o := agent.Options{Checkpoints: cs, CheckpointDir: dir, Keep: keep, HeartbeatFile: hb, TTL: ttl, StatusFile: status,
				Poll: poll, Clock: f.clock(), Log: f.IO.ErrOut, Once: once, SelfDestroy: selfDestroy(f), Quiet: quiet}
			if deadline != "" {
				if o.Deadline, err = time.Parse(time.RFC3339, deadline); err != nil {
					return &UsageError{Err: fmt.Errorf("--deadline: %w", err)}
				}
			}
			err = agent.Watch(cmd.Context(), o)
			if errors.Is(err, agent.ErrSelfDestroyed) && !strings.Contains(err.Error(), "failed") {
				return nil
			}
			return err
		},
	}
	watch.Flags().StringVar(&store, "store", "", "checkpoint store URI (s3://bucket/prefix or file:///path)")
	watch.Flags().StringVar(&dir, "dir", "checkpoints", "local checkpoint directory the workload writes")
	watch.Flags().IntVar(&keep, "keep", 3, "committed checkpoints to keep")
	watch.Flags().StringVar(&hb, "heartbeat", "", "file the controller touches")
	watch.Flags().DurationVar(&ttl, "ttl", 0, "destroy this instance when the heartbeat is older than this (0: never)")
	watch.Flags().StringVar(&deadline, "deadline", "", "destroy this instance at this RFC 3339 time")
	watch.Flags().StringVar(&status, "status", "", "status file to write")
	watch.Flags().DurationVar(&poll, "poll", 5*time.Second, "how often to look")
	watch.Flags().BoolVar(&once, "once", false, "commit what is complete, then exit")
	watch.Flags().DurationVar(&quiet, "quiet", 0, "also treat a step directory as complete when its files have not changed for this long (0: only the .complete marker)")

	var asJSON bool
	restore := &cobra.Command{
		Use:   "restore",
		Short: "Restore the newest committed checkpoint that verifies (falling back to older ones)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := openStore()
			if err != nil {
				return err
			}
			os.MkdirAll(filepath.Dir(filepath.Clean(dir)), 0o755)
			cm, skipped, err := cs.RestoreLatest(cmd.Context(), dir)
			res := map[string]any{"step": -1, "skipped": skipped}
			if err == nil {
				res["step"], res["manifest_sha256"] = cm.Step, cm.ManifestSHA256
			} else if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(res)
		},
	}
	restore.Flags().StringVar(&store, "store", "", "checkpoint store URI")
	restore.Flags().StringVar(&dir, "dir", ".vastrun/restore", "directory to restore into (replaced)")
	restore.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")

	upload := &cobra.Command{
		Use:   "upload",
		Short: "Upload final outputs with a manifest of SHA-256s",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := storage.Open(store, storage.Options{Getenv: f.Getenv})
			if err != nil {
				return &UsageError{Err: err}
			}
			cm, err := checkpoint.Store{S: s, Prefix: "outputs"}.Commit(cmd.Context(), dir, 0, f.clock().Now())
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(map[string]any{"manifest_sha256": cm.ManifestSHA256, "files": len(cm.Manifest.Files)})
		},
	}
	upload.Flags().StringVar(&store, "store", "", "output store URI")
	upload.Flags().StringVar(&dir, "dir", "outputs", "directory to upload")
	upload.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")
	cmd.AddCommand(watch, restore, upload)
	return cmd
}

// containerEnv reads a variable from the agent's environment, falling back
// to the container's init process: Vast sets CONTAINER_API_KEY and
// CONTAINER_ID for the container, and whether SSH sessions inherit them is
// not documented, but PID 1 always has them.
func containerEnv(f *Factory, name string) string {
	if v := f.Getenv(name); v != "" {
		return v
	}
	b, err := os.ReadFile("/proc/1/environ")
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// selfDestroy destroys this instance with its own restricted key.
func selfDestroy(f *Factory) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		key, idText := containerEnv(f, "CONTAINER_API_KEY"), containerEnv(f, "CONTAINER_ID")
		id, err := strconv.ParseInt(idText, 10, 64)
		if key == "" || err != nil {
			return errors.New("CONTAINER_API_KEY or CONTAINER_ID is not set: cannot destroy this instance")
		}
		base := f.Getenv("VASTRUN_API_URL")
		if base == "" {
			base = f.Getenv("VAST_URL")
		}
		c, err := vast.New(vast.Options{BaseURL: base, APIKey: key, Clock: f.clock()})
		if err != nil {
			return err
		}
		return c.DestroyInstance(ctx, provider.InstanceID(id))
	}
}
