package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/storage"
	canaryflow "github.com/vastrun/vastrun/internal/workflow/canary"
	"github.com/vastrun/vastrun/internal/workflow/ci"
	trainflow "github.com/vastrun/vastrun/internal/workflow/train"
)

// storageVars are the settings and credentials handed to the agent and the
// workload for the checkpoint store. The Vast key is never among them.
var storageVars = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
	"AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_S3_FORCE_PATH_STYLE", "AWS_PROFILE"}

// storageEnv is what the agent gets of vastrun's environment for the
// checkpoint store: the preflight probes the store with exactly these.
func storageEnv(f *Factory) map[string]string {
	env := map[string]string{}
	for _, k := range storageVars {
		if v := f.Getenv(k); v != "" {
			env[k] = v
		}
	}
	return env
}

func trainEngine(ctx context.Context, f *Factory, o *WorkflowOptions) (*lifecycle.Scope, error) {
	cfg, err := o.loadConfig()
	if err != nil {
		return nil, err
	}
	return trainEngineFor(ctx, f, o, cfg)
}

// trainEngineFor is trainEngine for a loaded config (sweep children).
func trainEngineFor(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config) (*lifecycle.Scope, error) {
	if !cfg.IsTrain() {
		return nil, &UsageError{Err: fmt.Errorf("%s has no train.command", o.ConfigPath), Hint: "add a train: section (docs/train.md) — 'vastrun init train' writes a config with one — or pass -f FILE"}
	}
	e, err := newEngine(ctx, f, o, cfg, cienv.Detect(f.Getenv))
	if err != nil {
		return nil, err
	}
	// newEngine expanded the store URIs' ${NAME}s (config/vars.go).
	if _, err := storage.Open(cfg.Train.CheckpointURI, storage.Options{Getenv: f.Getenv}); err != nil {
		return nil, &UsageError{Err: fmt.Errorf("train.checkpoint_uri: %w", err)}
	}
	e.StorageEnv = storageEnv(f)
	e.APIURL = f.APIURL()
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
		RunE: runCmd(opts, nil, runF, runTrain),
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
	r, runErr := trainflow.Run(ctx, e)
	return reportRun(f, r, withRunHints(f, o, interruptedRun(o, r, runErr)))
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
unless --accept-config-change. A run that already finished is never run
again: resume prints its receipt and exits as the run did, renting nothing
(a teardown the run could not confirm is tried again).`,
		Example: "  vastrun resume --yes -f train.yaml              # the latest run\n  vastrun resume mx1seio0a3dm --yes -f train.yaml",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.RunID = args[0]
			}
			return nil
		}, runF, runResume),
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
	recs, err := journal.Read(dir)
	if err != nil {
		return fmt.Errorf("read run %s: %w", dir, err)
	}
	st, err := runstate.Replay(recs)
	if err != nil {
		return err
	}
	if n := len(recs); n > 0 && f.Sim {
		// The embedded simulator's clock runs 30× the wall clock from when
		// a process starts it: the journal's records would go back in time
		// at the resume (and its timeline with them). It goes on from the
		// last record instead.
		f.simFrom = recs[n-1].Time
	}
	var e *lifecycle.Scope
	resume := func(e *lifecycle.Scope, ctx context.Context) (*receipt.Receipt, error) {
		return trainflow.Resume(ctx, e)
	}
	switch st.Workflow {
	case "train":
		e, err = trainEngine(ctx, f, o)
	case "ci":
		e, err = newEngine(ctx, f, o, cfg, cienv.Detect(f.Getenv))
		resume = func(e *lifecycle.Scope, ctx context.Context) (*receipt.Receipt, error) { return ci.Resume(ctx, e) }
	case "canary":
		if !cfg.IsCanary() {
			return &UsageError{Err: fmt.Errorf("run %s is a canary run and %s has no canary.smoke", st.RunID, o.ConfigPath), Hint: "resume with the vastrun.yaml the canary was started with (-f FILE)"}
		}
		e, err = newEngine(ctx, f, o, cfg, cienv.Detect(f.Getenv))
		resume = func(e *lifecycle.Scope, ctx context.Context) (*receipt.Receipt, error) {
			return canaryflow.Resume(ctx, e, false)
		}
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
	var cc *lifecycle.ConfigChangedError
	if errors.As(runErr, &cc) {
		return &UsageError{Err: runErr, Hint: fmt.Sprintf("resume with the configuration the run was started with (%s), or pass --accept-config-change to go on with the new one (journaled)", filepath.Join(dir, "manifest.json"))}
	}
	return reportRun(f, r, interruptedRun(o, r, runErr))
}
