package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/plan"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	canaryflow "github.com/vastrun/vastrun/internal/workflow/canary"
	"github.com/vastrun/vastrun/internal/workflow/ci"
	trainflow "github.com/vastrun/vastrun/internal/workflow/train"
)

// Saved plans: `vastrun plan` runs a workflow up to its approval with
// nothing rented (lifecycle.Propose) and writes what it would ask approval
// for as a sealed document (internal/plan); `vastrun apply` runs that
// workflow again with an approver bound to the document: it rents only
// what the plan covers, and only after the operator's yes (docs/approval.md).

// plannable are the workflows a plan can be made for.
var plannable = []string{ci.Name, canaryflow.Name, trainflow.Name}

// embeddedMarket is what a plan made under --sim names as its marketplace.
const embeddedMarket = "embedded simulator"

// plannedRun is one workflow's engine, its flow, and how to run it.
type plannedRun struct {
	e    *lifecycle.Scope
	flow lifecycle.Flow
	run  func(ctx context.Context) (*receipt.Receipt, error)
}

// plannedEngine builds the engine of workflow kind as its own command
// does (ci, canary, train), for plan and apply alike.
func plannedEngine(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, kind string) (*plannedRun, error) {
	env := cienv.Detect(f.Getenv)
	switch kind {
	case ci.Name:
		e, err := newEngine(ctx, f, o, cfg, env)
		if err != nil {
			return nil, err
		}
		return &plannedRun{e: e, flow: ci.Flow(), run: func(ctx context.Context) (*receipt.Receipt, error) { return ci.Run(ctx, e) }}, nil
	case canaryflow.Name:
		if !cfg.IsCanary() {
			return nil, &UsageError{Err: fmt.Errorf("%s has no canary.smoke", o.ConfigPath), Hint: "run 'vastrun canary init' to propose one"}
		}
		if err := image.CheckPinned(cfg.Image); err != nil {
			return nil, &UsageError{Err: err, Hint: "a plan binds the image by digest: write image: NAME@sha256:DIGEST (vastrun canary --resolve shows the digest)"}
		}
		e, err := newEngine(ctx, f, o, cfg, env)
		if err != nil {
			return nil, err
		}
		return &plannedRun{e: e, flow: canaryflow.NewFlow(e, false), run: func(ctx context.Context) (*receipt.Receipt, error) { return canaryflow.Run(ctx, e, false) }}, nil
	case trainflow.Name:
		e, err := trainEngineFor(ctx, f, o, cfg)
		if err != nil {
			return nil, err
		}
		return &plannedRun{e: e, flow: trainflow.NewFlow(e), run: func(ctx context.Context) (*receipt.Receipt, error) { return trainflow.Run(ctx, e) }}, nil
	}
	return nil, &UsageError{Err: fmt.Errorf("no workflow %q", kind), Hint: "plan one of: " + strings.Join(plannable, ", ")}
}

// fileSHA256 is the hex SHA-256 of a file's bytes.
func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// planInputs are what a plan binds: the configuration file's hash and the
// draft spec's commit, image and hash.
func planInputs(configPath, configSum string, draft lifecycle.Manifest) (plan.Inputs, error) {
	h, _, err := draft.Hash()
	if err != nil {
		return plan.Inputs{}, err
	}
	return plan.Inputs{Commit: draft.Commit, Image: draft.Image, ConfigFile: configPath, ConfigSHA256: configSum, ManifestSHA256: h}, nil
}

// marketName is the marketplace a plan is made on and applied against.
func marketName(f *Factory) string {
	if f.Sim {
		return embeddedMarket
	}
	return f.APIURL()
}

// PlanOptions are `vastrun plan`'s parsed flags, argument and dependencies.
type PlanOptions struct {
	f        *Factory
	Workflow WorkflowOptions
	Kind     string // ci, canary or train
	Out      string
	TTL      time.Duration
	SkipGate bool
	Now      func() time.Time
}

// NewCmdPlan builds `vastrun plan`. runF, when set, is called with the
// parsed options instead of runPlan (tests check the parsing that way).
func NewCmdPlan(f *Factory, runF func(context.Context, *PlanOptions) error) *cobra.Command {
	opts := &PlanOptions{f: f, Now: time.Now}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "plan [ci|canary|train]",
		Short: "Do everything up to the approval, rent nothing, and save the plan for 'vastrun apply'",
		Long: `Run a workflow (default ci) up to the point where it would ask to rent: the
preflight, the gate (unless --skip-gate), the frozen manifest, the offer
selection with the alternatives and their prices, the worst case against the
budget. Nothing is rented and no run is recorded. The plan is written to -o as
a versioned JSON document (vastrun.plan/v1, docs/json.md) whose SHA-256 is its
identity: it is printed (sha256=... on stdout, for a CI output) and written in
the file. A read-only API key is enough (docs/approval.md).

'vastrun apply FILE' then runs exactly that plan, and only that: it refuses a
plan older than --ttl, one whose commit, image digest, configuration or spec
changed, and a rental above the plan's price ceiling or worst case.`,
		Example: `  vastrun plan -f vastrun.yaml -o plan.json
  vastrun plan train -f train.yaml -o plan.json --ttl 30m
  vastrun plan --sim -f examples/ci.yaml -o plan.json --json`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			opts.Kind = ci.Name
			if len(args) == 1 {
				opts.Kind = args[0]
			}
			if !containsString(plannable, opts.Kind) {
				return &UsageError{Err: fmt.Errorf("cannot plan %q", opts.Kind), Hint: "plan one of: " + strings.Join(plannable, ", ")}
			}
			if opts.TTL <= 0 || opts.TTL > plan.MaxTTL {
				return &UsageError{Err: fmt.Errorf("--ttl %s is out of range", opts.TTL), Hint: fmt.Sprintf("a plan is valid for more than 0 and up to %s, e.g. --ttl 1h", plan.MaxTTL)}
			}
			if opts.Out == "" {
				return &UsageError{Err: errors.New("-o is empty"), Hint: "name the file to write the plan to, e.g. -o plan.json"}
			}
			return nil
		}, runF, runPlan),
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file (docs/config.md)")
	fl.StringVar(&o.Base, "base", "", "git base to diff against for paths: (default: the PR/MR base from CI)")
	fl.BoolVar(&o.AllowPRTarget, "allow-pull-request-target", false, "plan for pull_request_target events (they carry secrets into PR code)")
	fl.StringVarP(&opts.Out, "out", "o", "plan.json", "file to write the plan to")
	fl.DurationVar(&opts.TTL, "ttl", plan.DefaultTTL, "how long the plan may be applied")
	fl.BoolVar(&opts.SkipGate, "skip-gate", false, "do not run the gate: commands now (apply runs them, as every run does)")
	return cmd
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func runPlan(ctx context.Context, opts *PlanOptions) error {
	f, o := opts.f, &opts.Workflow
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	configSum, err := fileSHA256(o.ConfigPath)
	if err != nil {
		return err
	}
	env := cienv.Detect(f.Getenv)
	if ok, err := checkTrust(f, o, env); !ok || err != nil {
		return err
	}
	if _, err := checkBeforeRenting(ctx, f, cfg, opts.Kind); err != nil {
		return err
	}
	// The run exists only to be planned: its journal and evidence are
	// scratch, and it holds no team lease (the plan is not a run).
	scratch, err := os.MkdirTemp("", "vastrun-plan-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch) //nolint:errcheck // scratch under the temp dir: a leftover costs nothing and the plan stands
	cfg.StateDir, cfg.State, o.State = filepath.Join(scratch, "state"), "", ""
	o.EvidenceDir = filepath.Join(scratch, "evidence")
	pr, err := plannedEngine(ctx, f, o, cfg, opts.Kind)
	if err != nil {
		return err
	}
	created := opts.Now().UTC()
	prop, err := lifecycle.Propose(ctx, pr.e, pr.flow, opts.SkipGate)
	f.stopProgress()
	if errors.Is(err, lifecycle.ErrSkipped) {
		f.IO.Infof("no plan: %v", err)
		return nil
	}
	if err != nil {
		return withRunHints(f, o, err)
	}
	p, err := newSavedPlan(f, opts, prop, configSum, created)
	if err != nil {
		return err
	}
	b, err := p.Marshal()
	if err != nil {
		return err
	}
	// Through the sink like every file vastrun writes: a plan holds no
	// secret, and one that did would no longer match its hash, so apply
	// would refuse it.
	if err := f.sink(cfg).WriteFile(opts.Out, b, 0o644); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	summary := p.Summary()
	if !f.JSON {
		for _, l := range append(summary, prop.Plan.Pull.Lines()...) {
			f.IO.Infof("plan: %s", l)
		}
		f.IO.Infof("nothing was rented; show the plan to whoever approves, then: vastrun apply %s", opts.Out)
	}
	if err := env.AppendSummary("## vastrun plan\n\n```\n" + strings.Join(summary, "\n") + "\n```\n\nApply it with `vastrun apply " + opts.Out + " --sha256 " + p.SHA256 + "`.\n"); err != nil {
		f.IO.Infof("warning: could not write the job summary: %v", err)
	}
	if f.JSON {
		_, err = f.IO.Out.Write(f.IO.Redactor().JSON(b))
		return err
	}
	_, err = fmt.Fprintf(f.IO.Out, "sha256=%s\nplan=%s\n", p.SHA256, opts.Out)
	return err
}

// newSavedPlan seals what a proposal found as a saved plan.
func newSavedPlan(f *Factory, opts *PlanOptions, prop *lifecycle.Proposal, configSum string, created time.Time) (*plan.Plan, error) {
	lp := prop.Plan
	in, err := planInputs(opts.Workflow.ConfigPath, configSum, prop.Draft)
	if err != nil {
		return nil, err
	}
	prefix := label.DefaultPrefix
	if l, err := label.Parse(lp.Label); err == nil {
		prefix = l.Prefix
	}
	p := &plan.Plan{
		Schema: plan.Schema, Workflow: opts.Kind, CreatedAt: created, ExpiresAt: created.Add(opts.TTL),
		Marketplace: marketName(f), Simulated: f.Sim, Inputs: in, Gate: prop.Gate,
		Offer:        planOffer(lp.Offer, lp.TotalDPH),
		Alternatives: []plan.Offer{},
		Limits: plan.Limits{DiskGB: lp.DiskGB, CeilingDPH: round6(lp.CeilingDPH), WorstCaseUSD: round6(lp.WorstCase),
			CeilingWorstCaseUSD: round6(prop.CeilingWorstCase), BudgetUSD: lp.MaxSpendUSD, SpendBound: spendBound(lp, opts.Kind)},
		LabelPrefix: prefix, Notes: lp.Bid.Lines(), Manifest: prop.Draft,
	}
	for _, d := range prop.Decisions {
		if d.Eligible && !d.Chosen && len(p.Alternatives) < 20 {
			p.Alternatives = append(p.Alternatives, planOffer(d.Offer, d.TotalDPH))
		}
	}
	return p, p.Seal()
}

func planOffer(o provider.Offer, dph float64) plan.Offer {
	return plan.Offer{ID: int64(o.ID), MachineID: o.MachineID, GPUName: o.GPUName, NumGPUs: o.NumGPUs, Geolocation: o.Geolocation,
		Reliability: o.Reliability, DPHTotal: round6(dph)}
}

// ApplyOptions are `vastrun apply`'s parsed flags, argument and
// dependencies.
type ApplyOptions struct {
	f        *Factory
	Workflow WorkflowOptions
	Path     string
	// SHA256 is the hash the operator approved: any other plan is refused.
	SHA256 string
	Now    func() time.Time
}

// NewCmdApply builds `vastrun apply`; runF as for NewCmdPlan.
func NewCmdApply(f *Factory, runF func(context.Context, *ApplyOptions) error) *cobra.Command {
	opts := &ApplyOptions{f: f, Now: time.Now}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "apply PLAN",
		Short: "Run exactly a saved plan: rent only what it covers, after approval",
		Long: `Run the workflow a saved plan (vastrun plan -o FILE) was made for, bound to it.
It refuses, with exit 2 and nothing rented, a plan that was edited (its hash
no longer matches), one other than --sha256 names, one older than its TTL, one
made on another marketplace, and one whose inputs changed since: the commit,
the image digest, the configuration file or any field of the spec it freezes
(each named). It rents the planned offer; should another renter have taken it,
only another offer meeting the same policy within the plan's price ceiling and
worst case, or nothing. The gate runs again, as in every run.

Approval: --yes applies the plan without a prompt; without it, at a terminal,
the prompt shows the plan's summary and hash. Where approval comes from, and
why an agent cannot give it, is docs/approval.md. The receipt names the plan's
hash (plan_sha256).`,
		Example: `  vastrun apply plan.json
  vastrun apply plan.json --yes --sha256 "$PLAN_SHA256"
  vastrun apply plan.json --yes --json > receipt.json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			opts.Path = args[0]
			if s := opts.SHA256; s != "" && (len(s) != 64 || strings.Trim(strings.ToLower(s), "0123456789abcdef") != "") {
				return &UsageError{Err: fmt.Errorf("--sha256 %q is not a SHA-256", s), Hint: "pass the 64 hex digits 'vastrun plan' printed (sha256=...)"}
			}
			return nil
		}, runF, runApply),
	}
	o.addFlags(cmd, false)
	fl := cmd.Flags()
	fl.StringVarP(&o.ConfigPath, "file", "f", "", "config file (default: the one the plan was made from)")
	fl.StringVar(&o.Base, "base", "", "git base to diff against for paths: (default: the PR/MR base from CI)")
	fl.BoolVar(&o.AllowPRTarget, "allow-pull-request-target", false, "run for pull_request_target events (they carry secrets into PR code)")
	fl.StringVar(&opts.SHA256, "sha256", "", "apply only if the plan's hash is this one (the hash that was approved)")
	return cmd
}

// refusal is a refused plan as the command reports it: exit 2, with what
// to do next.
func refusal(err error, p *plan.Plan, configPath string) error {
	var re *plan.RefusedError
	if !errors.As(err, &re) {
		return err
	}
	again := "make a new plan (vastrun plan -o FILE), show it, and apply that one"
	if p != nil {
		again = fmt.Sprintf("make a new plan (vastrun plan %s -f %s -o FILE), show it, and apply that one", p.Workflow, configPath)
	}
	switch re.Reason {
	case plan.OverCeiling, plan.OverWorstCase:
		return &UsageError{Err: err, Hint: "the market moved past what the plan approved: " + again + " (or widen gpu: / raise gpu.max_dph)"}
	case plan.WrongHash:
		return &UsageError{Err: err, Hint: "apply the file whose hash was approved, or have the new plan approved"}
	}
	return &UsageError{Err: err, Hint: again}
}

func runApply(ctx context.Context, opts *ApplyOptions) error {
	f, o := opts.f, &opts.Workflow
	p, err := plan.Read(opts.Path)
	if err != nil {
		return refusal(err, nil, "")
	}
	if o.ConfigPath == "" {
		o.ConfigPath = p.Inputs.ConfigFile
	}
	for _, err := range []error{p.CheckHash(opts.SHA256), p.CheckFresh(opts.Now())} {
		if err != nil {
			return refusal(err, p, o.ConfigPath)
		}
	}
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	configSum, err := fileSHA256(o.ConfigPath)
	if err != nil {
		return err
	}
	env := cienv.Detect(f.Getenv)
	if ok, err := checkTrust(f, o, env); !ok || err != nil {
		return err
	}
	if _, err := checkBeforeRenting(ctx, f, cfg, p.Workflow); err != nil {
		return err
	}
	if m := marketName(f); m != p.Marketplace {
		return refusal(&plan.RefusedError{SHA256: p.SHA256, Reason: plan.WrongMarket, Detail: fmt.Sprintf("it was made on %s, and this is %s", p.Marketplace, m)}, p, o.ConfigPath)
	}
	o.applying = &appliedPlan{plan: p, configPath: o.ConfigPath, now: opts.Now}
	pr, err := plannedEngine(ctx, f, o, cfg, p.Workflow)
	if err != nil {
		return err
	}
	draft := lifecycle.Draft(ctx, pr.e.Deps, pr.flow)
	in, err := planInputs(o.ConfigPath, configSum, draft)
	if err != nil {
		return err
	}
	if err := p.CheckInputs(in, draft); err != nil {
		return refusal(err, p, o.ConfigPath)
	}
	pr.e.PreferOffer, pr.e.PlanSHA256 = provider.OfferID(p.Offer.ID), p.SHA256
	f.IO.Infof("applying plan %s (%s, made %s)", p.SHA256, p.Workflow, p.CreatedAt.Format(time.RFC3339))
	r, runErr := pr.run(ctx)
	return reportRun(f, r, withRunHints(f, o, interruptedRun(o, r, runErr)))
}

// appliedPlan is the saved plan a run applies.
type appliedPlan struct {
	plan       *plan.Plan
	configPath string
	now        func() time.Time
}

// approver is apply's approver: each rental the run asks for is checked
// against the saved plan (still fresh, the frozen commit and image the
// planned ones, the price within its ceiling and worst case) before the
// operator is asked — or --yes answers — as at any other approval.
func (a *appliedPlan) approver(ctx context.Context, f *Factory, yes bool, e *lifecycle.Scope) func(lifecycle.Plan) (bool, error) {
	p, configPath, now := a.plan, a.configPath, a.now
	ask := approver(ctx, f.IO, yes, func() string { return e.Workflow })
	return func(lp lifecycle.Plan) (bool, error) {
		m := e.Frozen()
		for _, err := range []error{p.CheckFresh(now()), p.CheckRun(m.Commit, m.Image), p.Admit(int64(lp.Offer.ID), lp.TotalDPH, lp.WorstCase)} {
			if err != nil {
				return false, refusal(err, p, configPath)
			}
		}
		if int64(lp.Offer.ID) != p.Offer.ID {
			f.IO.Infof("plan: the planned offer %d is gone or no longer meets the policy; offer %d meets it within the plan's ceiling $%.4f/h", p.Offer.ID, lp.Offer.ID, p.Limits.CeilingDPH)
		}
		if !yes {
			for _, l := range p.Summary() {
				f.IO.Infof("plan: %s", l)
			}
		}
		return ask(lp)
	}
}
