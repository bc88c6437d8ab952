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
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/ci"
	"github.com/vastrun/vastrun/internal/config"
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
	return trainEngineFor(ctx, f, o, cfg)
}

// trainEngineFor is trainEngine for a loaded config (sweep children).
func trainEngineFor(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config) (*run.Engine, error) {
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

// TrainOptions are `vastrun train`'s parsed flags and dependencies.
type TrainOptions struct {
	f        *Factory
	Workflow WorkflowOptions
}

// NewCmdTrain builds `vastrun train`. runF, when set, is called with the
// parsed options instead of runTrain (tests check the parsing that way).
func NewCmdTrain(f *Factory, runF func(context.Context, *TrainOptions) error) *cobra.Command {
	opts := &TrainOptions{f: f}
	o := &opts.Workflow
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
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runTrain(cmd.Context(), opts)
		},
	}
	o.addFlags(cmd, true)
	return cmd
}

func runTrain(ctx context.Context, opts *TrainOptions) error {
	f, o := opts.f, &opts.Workflow
	e, err := trainEngine(ctx, f, o)
	if err != nil {
		return err
	}
	if _, err := checkBeforeRenting(ctx, f, e.Config, "train"); err != nil {
		return err
	}
	r, runErr := e.RunTrain(ctx)
	return reportRun(f, r, withRunHints(f, o, runErr))
}

// ResumeOptions are `vastrun resume`'s parsed flags, argument and
// dependencies.
type ResumeOptions struct {
	f                  *Factory
	Workflow           WorkflowOptions
	RunID              string // "" means the latest run
	AcceptConfigChange bool
}

// NewCmdResume builds `vastrun resume`; runF as for NewCmdTrain.
func NewCmdResume(f *Factory, runF func(context.Context, *ResumeOptions) error) *cobra.Command {
	opts := &ResumeOptions{f: f}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "resume [RUN]",
		Short: "Continue a training, ci or canary run whose controller died, from its journal",
		Long: `Continue a training, ci or canary run from its journal. If its instance is still running,
vastrun re-attaches to it (no second rental); if it is gone or paused, vastrun
destroys what is left and continues on a replacement from the last committed
checkpoint. The run's frozen manifest (checked against the journal's hash)
must match the configuration given: a changed field is refused by name,
unless --accept-config-change.`,
		Example: "  vastrun resume --yes -f train.yaml              # the latest run\n  vastrun resume mx1seio0a3dm --yes -f train.yaml",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.RunID = args[0]
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runResume(cmd.Context(), opts)
		},
	}
	o.addFlags(cmd, true)
	o.addResumeTeamFlags(cmd)
	cmd.Flags().BoolVar(&opts.AcceptConfigChange, "accept-config-change", false, "go on although the configuration differs from the run's frozen manifest (the change is journaled)")
	return cmd
}

func runResume(ctx context.Context, opts *ResumeOptions) error {
	f, o := opts.f, &opts.Workflow
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	dir, err := teamRunDir(ctx, f, o, cfg, opts.RunID) // the local dir, or the team bucket's cache
	if err != nil {
		if u := (*UsageError)(nil); errors.As(err, &u) || errors.As(err, new(*hintedError)) {
			return err
		}
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
	case "canary":
		if !cfg.IsCanary() {
			return &UsageError{Err: fmt.Errorf("run %s is a canary run and %s has no canary.smoke", st.RunID, o.ConfigPath), Hint: "resume with the vastrun.yaml the canary was started with (-f FILE)"}
		}
		e, err = newEngine(ctx, f, o, cfg, ci.Detect(f.Getenv))
		resume = func(e *run.Engine, ctx context.Context) (*run.Receipt, error) { return e.ResumeCanary(ctx, false) }
	default:
		return &UsageError{Err: fmt.Errorf("run %s is a %q run; resume continues train, ci and canary runs", st.RunID, st.Workflow), Hint: "tear it down with: vastrun down --run " + st.RunID}
	}
	if err != nil {
		return err
	}
	if err := openRun(e, dir); err != nil {
		return err
	}
	e.AcceptConfigChange = opts.AcceptConfigChange
	r, runErr := resume(e, ctx)
	var cc *run.ConfigChangedError
	if errors.As(runErr, &cc) {
		return &UsageError{Err: runErr, Hint: fmt.Sprintf("resume with the configuration the run was started with (%s), or pass --accept-config-change to go on with the new one (journaled)", filepath.Join(dir, "manifest.json"))}
	}
	return reportRun(f, r, runErr)
}

// NewCmdAgent builds `vastrun agent`, which runs on the instance.
func NewCmdAgent(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "The on-instance helper for training runs (started by vastrun train)",
		Long: `Runs on a training instance. It starts the workload itself (agent start),
commits its checkpoints, and answers the controller in typed, versioned JSON
(agent status --json). Storage credentials come from the standard AWS
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
	var hb, status, deadline, files, check, stepFrom, command string
	var ttl, poll, quiet time.Duration
	var once, asJSON bool
	watchOptions := func(l agent.Layout) (agent.Options, error) {
		cs, err := openStore()
		if err != nil {
			return agent.Options{}, err
		}
		if err := config.CheckStepFrom(stepFrom); err != nil {
			return agent.Options{}, &UsageError{Err: fmt.Errorf("--step-from: %w", err)}
		}
		abs := func(p string) string {
			if p == "" {
				return ""
			}
			return l.Abs(p)
		}
		o := agent.Options{Checkpoints: cs, CheckpointDir: abs(dir), Keep: keep, HeartbeatFile: abs(hb), TTL: ttl, StatusFile: abs(status),
			Poll: poll, Clock: f.clock(), Log: f.IO.ErrOut, Once: once, SelfDestroy: selfDestroy(f), Quiet: quiet,
			Files: files, Check: check, StepFrom: stepFrom, LogFile: l.Abs(agent.LogFile), Home: l.Home}
		if deadline != "" {
			if o.Deadline, err = time.Parse(time.RFC3339, deadline); err != nil {
				return o, &UsageError{Err: fmt.Errorf("--deadline: %w", err)}
			}
		}
		return o, nil
	}
	runWatch := func(ctx context.Context, o agent.Options) error {
		err := agent.Watch(ctx, o)
		if errors.Is(err, agent.ErrSelfDestroyed) { // done its job; a failed destroy stays an error
			return nil
		}
		return err
	}
	watchFlags := func(c *cobra.Command) {
		c.Flags().StringVar(&store, "store", "", "checkpoint store URI (s3://bucket/prefix or file:///path)")
		c.Flags().StringVar(&dir, "dir", "checkpoints", "local checkpoint directory the workload writes")
		c.Flags().IntVar(&keep, "keep", 3, "committed checkpoints to keep, in the store and on this instance")
		c.Flags().StringVar(&hb, "heartbeat", "", "file the controller touches")
		c.Flags().DurationVar(&ttl, "ttl", 0, "destroy this instance when the heartbeat is older than this (0: never)")
		c.Flags().StringVar(&deadline, "deadline", "", "destroy this instance at this RFC 3339 time")
		c.Flags().StringVar(&status, "status", "", "status file to write")
		c.Flags().DurationVar(&poll, "poll", 5*time.Second, "how often to look")
		c.Flags().DurationVar(&quiet, "quiet", 0, "also treat a step directory as complete when its files have not changed for this long and none is open for writing (0: only the .complete marker)")
		c.Flags().StringVar(&files, "files", "", "single-file checkpoints saved in place (a path or glob relative to the login directory)")
		c.Flags().StringVar(&check, "check", "", "command that must accept a snapshot (its path is appended) before it is committed")
		c.Flags().StringVar(&stepFrom, "step-from", "", "where a snapshot's step comes from: json:FIELD or regex:RE over the log (default: a counter)")
	}
	watch := &cobra.Command{
		Use:   "watch",
		Short: "Commit complete checkpoints as they appear; destroy this instance if the controller's heartbeat lapses",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			o, err := watchOptions(l)
			if err != nil {
				return err
			}
			return runWatch(cmd.Context(), o)
		},
	}
	watchFlags(watch)
	watch.Flags().BoolVar(&once, "once", false, "commit what is complete, then exit")

	start := &cobra.Command{
		Use:   "start",
		Short: "Start the workload under a detached agent that commits its checkpoints (never a second one)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			if strings.TrimSpace(command) == "" {
				return &UsageError{Err: errors.New("--command is required")}
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			sargs := []string{"agent", "supervise"}
			cmd.Flags().Visit(func(fl *pflag.Flag) {
				if fl.Name != "json" {
					sargs = append(sargs, "--"+fl.Name+"="+fl.Value.String())
				}
			})
			res, err := agent.Start(l, exe, sargs, os.Environ())
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(res)
		},
	}
	watchFlags(start)
	start.Flags().StringVar(&command, "command", "", "the workload, run by /bin/sh -c in the login directory")
	start.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")

	supervise := &cobra.Command{
		Use:    "supervise",
		Short:  "Run the workload and the watch loop (started by agent start)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			o, err := watchOptions(l)
			if err != nil {
				return err
			}
			// fd 3 is the lock Start handed over: held by this process only,
			// never inherited by the workload, so it ends with the agent.
			syscall.CloseOnExec(3)
			sv := &agent.Supervisor{Layout: l, Command: command, Env: os.Environ(), Clock: f.clock(), Ready: os.NewFile(4, "ready")}
			// The baseline of single-file checkpoints is taken before the
			// workload starts, so a restored file is not snapshot again.
			pre, err := agent.Prepare(o)
			if err != nil {
				return err
			}
			pid, exited, err := sv.Launch()
			if err != nil {
				return err
			}
			pre.WorkloadPID, pre.Exited = pid, exited
			pre.Finalized = func(int) { sv.Finalize() }
			return runWatch(cmd.Context(), pre)
		},
	}
	watchFlags(supervise)
	supervise.Flags().StringVar(&command, "command", "", "the workload")

	var touch bool
	var logOffset, logMax, metricsOffset int64
	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Report the workload's state, checkpoints, resume proof, heartbeat age and disk (JSON, schema vastrun.agent.status v1)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			r := agent.BuildReport(l, agent.ReportOptions{Touch: touch, LogOffset: logOffset, LogMax: logMax, MetricsOffset: metricsOffset, Clock: f.clock()})
			return json.NewEncoder(f.IO.Out).Encode(r)
		},
	}
	statusCmd.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")
	statusCmd.Flags().BoolVar(&touch, "touch-heartbeat", false, "touch the controller's heartbeat after reading its age")
	statusCmd.Flags().Int64Var(&logOffset, "log-offset", 0, "return the workload's log from this byte offset")
	statusCmd.Flags().Int64Var(&logMax, "log-max", 0, "return at most this many bytes of the log (0: none)")
	statusCmd.Flags().Int64Var(&metricsOffset, "metrics-offset", 0, "with --log-max: return the workload's metrics (JSON lines) from this byte offset")

	restore := &cobra.Command{
		Use:   "restore",
		Short: "Restore the newest committed checkpoint that verifies (falling back to older ones)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := openStore()
			if err != nil {
				return err
			}
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			res, err := agent.Restore(cmd.Context(), l, cs, dir, files)
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(res)
		},
	}
	restore.Flags().StringVar(&store, "store", "", "checkpoint store URI")
	restore.Flags().StringVar(&dir, "dir", agent.ResumeDir, "directory to restore into (replaced)")
	restore.Flags().StringVar(&files, "files", "", "also put restored files matching this glob back at their original paths")
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
	manifest := &cobra.Command{
		Use:   "manifest PATH...",
		Short: "List the files under PATHs (relative to the login directory) with sizes and SHA-256s (JSON)",
		Args:  usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agent.NewLayout("")
			if err != nil {
				return err
			}
			files, err := agent.SumTree(l.Home, args)
			if err != nil {
				return err
			}
			return json.NewEncoder(f.IO.Out).Encode(agent.ManifestResult{Schema: agent.ManifestSchema, SchemaVersion: agent.SchemaVersion, Files: files})
		},
	}
	manifest.Flags().BoolVar(&asJSON, "json", true, "print JSON (always on)")
	cmd.AddCommand(watch, start, supervise, statusCmd, restore, upload, manifest, newAgentRetireCmd(f), newAgentHeartbeatCmd(f, nil))
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
