package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// WorkflowOptions are the flags shared by ci, up, exec and down.
type WorkflowOptions struct {
	ConfigPath          string
	Yes                 bool
	EvidenceDir         string
	StateDir            string
	Base                string
	AllowPRTarget       bool
	RunID               string
	allowMissingConfigs bool
	// heartbeatTTL, when set, replaces timeouts.heartbeat_ttl (up --ttl).
	heartbeatTTL time.Duration
	// Team state (team.go).
	State     string
	WaitLease time.Duration
	team      *team.Controller
	// applying, when set, is the saved plan the run applies: the
	// engine's approver is bound to it (plancmd.go).
	applying *appliedPlan
}

func (o *WorkflowOptions) addFlags(cmd *cobra.Command, withConfig bool) {
	fl := cmd.Flags()
	if withConfig {
		fl.StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file (docs/config.md)")
		fl.StringVar(&o.Base, "base", "", "git base to diff against for paths: (default: the PR/MR base from CI)")
		fl.BoolVar(&o.AllowPRTarget, "allow-pull-request-target", false, "run for pull_request_target events (they carry secrets into PR code)")
	}
	fl.BoolVarP(&o.Yes, "yes", "y", false, "approve renting/destroying without a prompt")
	fl.StringVar(&o.EvidenceDir, "evidence-dir", "", "where to write evidence (default ./vastrun-evidence/RUN)")
	fl.StringVar(&o.StateDir, "state-dir", "", "where run journals live (default: state_dir in the config, else .vastrun)")
	o.addTeamFlags(cmd)
}

func (o *WorkflowOptions) loadConfig() (*config.Config, error) {
	c, err := config.Load(o.ConfigPath)
	if err != nil {
		if o.allowMissingConfigs && errors.Is(err, os.ErrNotExist) {
			c = config.Defaults()
		} else {
			return nil, configError(o.ConfigPath, err)
		}
	}
	if o.StateDir != "" {
		c.StateDir = o.StateDir
	}
	if o.heartbeatTTL > 0 {
		c.Timeouts.HeartbeatTTL = config.Duration(o.heartbeatTTL)
	}
	return c, nil
}

// credentialVars hold storage credentials that vastrun may see.
var credentialVars = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "VAST_API_KEY"}

// approver prints the plan and asks, unless --yes. Without a terminal and
// without --yes it refuses, so that nothing is rented by accident. A
// Ctrl-C at the prompt (ctx ends) is a no, at once: nothing is rented.
func approver(ctx context.Context, io *IOStreams, yes bool, workflow func() string) func(lifecycle.Plan) (bool, error) {
	return func(p lifecycle.Plan) (bool, error) {
		if d := io.progress(); d != nil && !yes { // keep the status line off the prompt
			d.Hold(true)
			defer d.Hold(false)
		}
		io.Infof("plan: rent offer %d, %s x%d on machine %d (%s), $%.4f/h with %g GB disk",
			p.Offer.ID, p.Offer.GPUName, p.Offer.NumGPUs, p.Offer.MachineID, p.Offer.Geolocation, p.TotalDPH, p.DiskGB)
		io.Infof("plan: %s; label %s", spendBound(p, workflow()), p.Label)
		for _, l := range append(append(p.Bid.Lines(), p.Pull.Lines()...), p.DeadMan.Lines()...) {
			io.Infof("plan: %s", l)
		}
		if p.CeilingDPH > p.TotalDPH {
			io.Infof("plan: should another renter take it first, the next offer meeting the policy up to $%.4f/h is rented instead", p.CeilingDPH)
		}
		if yes {
			return true, nil
		}
		if !io.InTTY {
			return false, nil
		}
		if ok, _ := askYes(ctx, io, "rent it?"); ok {
			return true, nil
		}
		return false, lifecycle.ErrDeclined
	}
}

// newEngine wires an engine from the factory and flags.
func newEngine(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, env cienv.Env) (*lifecycle.Scope, error) {
	cfg.ExpandVars(f.Getenv) // the one place: every engine's store URIs (config/vars.go)
	m, err := f.Marketplace(ctx)
	if err != nil {
		return nil, err
	}
	repo, _ := os.Getwd()
	red := f.IO.Redactor()
	red.Add(f.KeyForMasking())
	// Storage credentials and declared secrets are masked from the start,
	// in every sink, whether or not this workflow hands them on.
	for _, k := range credentialVars {
		red.Add(f.Getenv(k))
	}
	for _, name := range cfg.Secrets {
		red.Add(f.Getenv(name))
	}
	env.Redactor = red // the CI system's files go through the same masking
	e := lifecycle.New(&lifecycle.Deps{
		Market: m, Clock: f.clock(), Log: f.Logger(), UI: f.IO, CI: env, Getenv: f.Getenv,
		Redactor: red, Annotations: f.IO.ErrOut,
		Config: cfg, RepoDir: repo, StateRoot: cfg.StateDir, EvidenceDir: o.EvidenceDir, EvidenceRoot: cfg.EvidenceDir,
		Base: o.Base, Simulated: f.Sim, Stream: f.IO.ErrOut, ImageSize: f.imageSizer(cfg),
		Notify: notifications(f, cfg), AgentBinary: f.agentBinary(),
	})
	// The dead-man switch on every instance destroys it through this API.
	e.APIURL = f.APIURL()
	e.Approve = approver(ctx, f.IO, o.Yes, func() string { return e.Workflow })
	if o.applying != nil {
		e.Approve = o.applying.approver(ctx, f, o.Yes, e)
	}
	if d := f.startProgress(env); d != nil {
		e.Observer, e.Stream = d, d.Writer()
	}
	e.Observer = f.watchRun(e.Observer) // what a Ctrl-C stops (interrupt.go)
	if s := f.SimServer(); s != nil {
		e.SimInstance = s.InstanceRuntime(cfg.Image)
	}
	if err := attachTeam(ctx, f, o, cfg, e); err != nil {
		return nil, err
	}
	return e, nil
}

// checkTrust stops untrusted events before any key is read.
func checkTrust(f *Factory, o *WorkflowOptions, env cienv.Env) (bool, error) {
	t := env.CheckTrust(os.ReadFile, o.AllowPRTarget)
	if t.Trusted {
		return true, nil
	}
	f.IO.Infof("skipping the GPU step: %s", t.Reason)
	if err := env.AppendSummary("## vastrun: skipped\n\n" + t.Reason + "\n"); err != nil {
		f.IO.Infof("warning: could not write the job summary: %v", err)
	}
	if f.JSON {
		return false, json.NewEncoder(f.IO.Out).Encode(map[string]string{"schema": receipt.Schema, "outcome": string(lifecycle.OutcomeUntrusted), "reason": t.Reason})
	}
	return false, nil
}

// trustedEngine loads the config, skips untrusted events (before any key
// is read) and builds the engine. A nil engine with a nil error means the
// step was skipped.
func trustedEngine(ctx context.Context, f *Factory, o *WorkflowOptions) (*lifecycle.Scope, error) {
	cfg, err := o.loadConfig()
	if err != nil {
		return nil, err
	}
	env := cienv.Detect(f.Getenv)
	if ok, err := checkTrust(f, o, env); !ok || err != nil {
		return nil, err
	}
	if _, err := checkBeforeRenting(ctx, f, cfg, "ci"); err != nil {
		return nil, err
	}
	return newEngine(ctx, f, o, cfg, env)
}

// reportRun prints a workflow's receipt and returns the run's own error,
// or the printing error when the run succeeded.
//
// A run whose outcome succeeded without the work running (the GPU step
// skipped because the change touches none of paths:) exits 0, as
// docs/exit-codes.md says: receipt.Outcome decides, not the error's text.
func reportRun(f *Factory, r *receipt.Receipt, runErr error) error {
	runErr = asCancelled(runErr)
	annotateFailure(f, runErr)
	f.stopProgress()
	if perr := printReceipt(f, r); perr != nil && runErr == nil {
		return perr
	}
	if runErr != nil && r != nil && r.Outcome.Succeeded() && r.Cleanup.Confirmed {
		// A run that succeeded still fails the step when its evidence
		// could not be copied to evidence.uri (exit 11).
		if ev := (*lifecycle.EvidenceUploadError)(nil); errors.As(runErr, &ev) {
			return ev
		}
		f.IO.Infof("%v", runErr)
		return nil
	}
	return runErr
}

func printReceipt(f *Factory, r *receipt.Receipt) error {
	if r == nil {
		return nil
	}
	if f.JSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = f.IO.Out.Write(append(f.IO.Redactor().JSON(b), '\n'))
		return err
	}
	if declined(r) {
		return nil // nothing was rented: the error line says so
	}
	if err := writeSummary(f, r); err != nil {
		return err
	}
	f.IO.Infof("evidence in %s", r.EvidenceDir)
	return nil
}

// CIOptions are `vastrun ci`'s parsed flags and dependencies.
type CIOptions struct {
	f        *Factory
	Workflow WorkflowOptions
}

// NewCmdCI builds `vastrun ci`. runF, when set, is called with the parsed
// options instead of runCI (tests check the parsing that way).
func NewCmdCI(f *Factory, runF func(context.Context, *CIOptions) error) *cobra.Command {
	opts := &CIOptions{f: f}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "ci",
		Short: "Run the GPU acceptance step: gate, rent one instance, test, destroy, evidence",
		Long: `Run a GPU acceptance step end to end:

  1. skip untrusted events (fork PRs, pull_request_target) before the key is read
  2. run the gate: commands locally; a failure rents nothing
  3. skip when the change touches none of paths:
  4. freeze a manifest (commit, image digest, test, policy, limits, label)
  5. choose the cheapest offer meeting the GPU policy, show the plan, and rent
     it only with --yes (or a yes at a terminal)
  6. wait for it (bounded), verify image, GPU, CUDA and disk, run the test
  7. destroy it and confirm, on success, failure, Ctrl-C, timeout or panic
  8. write evidence: manifest, receipt, logs, summary

Exit codes: 0 passed, 3 test or gate failed, 5 no offer, 6 needs --yes,
7 cleanup NOT confirmed, 9 over budget, 10 never became ready (docs/exit-codes.md).`,
		Example: `  vastrun ci --sim --yes -f examples/ci.yaml
  VAST_API_KEY=... vastrun ci --yes -f vastrun.yaml --evidence-dir out/
  vastrun ci --yes --json > receipt.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, nil, runF, runCI),
	}
	o.addFlags(cmd, true)
	return cmd
}

func runCI(ctx context.Context, opts *CIOptions) error {
	f, o := opts.f, &opts.Workflow
	if done, err := maybeMatrix(ctx, f, o); done { // gpu.matrix (many.go)
		return err
	}
	e, err := trustedEngine(ctx, f, o)
	if e == nil || err != nil {
		return err
	}
	r, runErr := ci.Run(ctx, e)
	return reportRun(f, r, withRunHints(f, o, interruptedRun(o, r, runErr)))
}

// UpOptions are `vastrun up`'s parsed flags and dependencies.
type UpOptions struct {
	f        *Factory
	Workflow WorkflowOptions
	// TTL is the instance's lease: its dead-man switch destroys it once no
	// vastrun command has touched it for this long.
	TTL time.Duration
}

// DefaultUpTTL is up's lease when --ttl is not given.
const DefaultUpTTL = 30 * time.Minute

// NewCmdUp builds `vastrun up`; runF as for NewCmdCI.
func NewCmdUp(f *Factory, runF func(context.Context, *UpOptions) error) *cobra.Command {
	opts := &UpOptions{f: f}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Gate, rent and verify one instance, and leave it running for exec/down",
		Long: `Do the first half of 'vastrun ci': gate, rent, wait, verify. The instance
stays up; its id, label and run id go to stdout, to .vastrun/ and to the CI's
durable state (GITHUB_OUTPUT, GITHUB_STATE, the GitLab dotenv file), so that
'vastrun exec' and 'vastrun down' in later steps or jobs can find it.
A failure destroys what was rented.

The instance carries a dead-man switch: it destroys itself once no vastrun
command has touched it for --ttl ('vastrun exec', 'vastrun ssh' and
'vastrun status' renew it), so a job that never reaches 'vastrun down'
does not leave it billing.`,
		Example: `  vastrun up --yes -f vastrun.yaml
  vastrun exec -- nvidia-smi
  vastrun down --yes
  vastrun up --yes --ttl 2h`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(*cobra.Command, []string) error {
			if opts.TTL < config.MinHeartbeatTTL {
				return &UsageError{Err: fmt.Errorf("--ttl %s is under the %s minimum", opts.TTL, config.MinHeartbeatTTL), Hint: "give the instance's lease with its unit, e.g. --ttl 30m"}
			}
			return nil
		}, runF, runUp),
	}
	o.addFlags(cmd, true)
	cmd.Flags().DurationVar(&opts.TTL, "ttl", DefaultUpTTL, "destroy the instance once no vastrun command (exec, ssh, status) has touched it for this long")
	return cmd
}

func runUp(ctx context.Context, opts *UpOptions) error {
	f, o := opts.f, &opts.Workflow
	o.heartbeatTTL = opts.TTL // the lease is the dead-man switch's TTL
	e, err := trustedEngine(ctx, f, o)
	if e == nil || err != nil {
		return err
	}
	r, runErr := ci.Up(ctx, e)
	if runErr != nil {
		_ = printReceipt(f, r) // the run's error is the one to report, as reportRun does
		return asCancelled(withRunHints(f, o, runErr))
	}
	a := e.State().Current()
	if f.JSON {
		return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.up/v1", "run_id": r.RunID, "label": r.Label, "instance_id": a.InstanceID, "simulated": f.Sim})
	}
	if _, err := fmt.Fprintf(f.IO.Out, "run_id=%s\nlabel=%s\ninstance_id=%d\n", r.RunID, r.Label, a.InstanceID); err != nil {
		return err
	}
	f.IO.Infof("instance %d is up; run 'vastrun exec -- CMD', then 'vastrun down --yes'", a.InstanceID)
	return nil
}

// ExecOptions are `vastrun exec`'s parsed flags, arguments and dependencies.
type ExecOptions struct {
	f        *Factory
	Workflow WorkflowOptions
	Instance int64
	Script   string // the command, its words joined by spaces
}

// NewCmdExec builds `vastrun exec`; runF as for NewCmdCI.
func NewCmdExec(f *Factory, runF func(context.Context, *ExecOptions) error) *cobra.Command {
	opts := &ExecOptions{f: f, Workflow: WorkflowOptions{allowMissingConfigs: true}}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "exec [flags] -- COMMAND...",
		Short: "Run a command on the run's instance (or on --instance ID)",
		Long: `Run a command on the current run's instance over SSH, non-interactively,
with the config's env and secrets, streaming redacted output. With --instance
(for a CI job that did not run 'up' itself) a fresh key is attached through
the API. The exit status is the command's (3 when it fails).`,
		Example: `  vastrun exec -- python -m pytest tests/gpu
  vastrun exec --instance 30511207 -- nvidia-smi`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			opts.Script = strings.Join(args, " ")
			return nil
		}, runF, runExec),
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for env, secrets and the job timeout (optional)")
	cmd.Flags().Int64Var(&opts.Instance, "instance", 0, "instance id to run on, instead of the current run's")
	cmd.Flags().StringVar(&o.RunID, "run", "", "run id (default: the latest in the state dir)")
	return cmd
}

func runExec(ctx context.Context, opts *ExecOptions) error {
	f, o := opts.f, &opts.Workflow
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	e, err := newEngine(ctx, f, o, cfg, cienv.Detect(f.Getenv))
	if err != nil {
		return err
	}
	var res *receipt.TestOutcome
	if opts.Instance > 0 {
		if err := e.Begin("exec"); err != nil {
			return err
		}
		defer func() { _ = e.Close() }() // releases the journal's lock: its records are fsync'd as appended
		res, err = e.ExecInstance(ctx, provider.InstanceID(opts.Instance), opts.Script)
	} else {
		dir, derr := runDir(cfg.StateDir, o.RunID)
		if derr != nil {
			return &UsageError{Err: derr, Hint: "run 'vastrun up' first, or pass --instance ID"}
		}
		if err := checkJournal(dir); err != nil {
			return err
		}
		if err := openRun(e, dir); err != nil {
			return err
		}
		defer func() { _ = e.Close() }() // as above
		res, err = e.Exec(ctx, opts.Script)
	}
	if err != nil {
		return err
	}
	if f.JSON {
		if err := writeJSON(f.IO, execResult(e, opts.Instance, res)); err != nil {
			return err
		}
	}
	if !res.Passed() {
		return &lifecycle.TestFailedError{Code: res.Code()}
	}
	return nil
}

func runDir(stateRoot, runID string) (string, error) {
	if runID != "" {
		d := filepath.Join(stateRoot, "runs", runID)
		if _, err := os.Stat(d); err != nil {
			return "", fmt.Errorf("run %s: %w", runID, err)
		}
		return d, nil
	}
	d, err := lifecycle.CurrentRunDir(stateRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return "", &NoRunError{StateDir: stateRoot, Err: err}
	}
	return d, err
}
