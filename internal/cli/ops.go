package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/janitor"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/preflight"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/spec"
	"github.com/vastrun/vastrun/internal/text"
)

// confirmDestroy asks before destroying, like approver before renting; a
// Ctrl-C at the prompt cancels as a no does.
func confirmDestroy(ctx context.Context, f *Factory, yes bool, what string) error {
	f.IO.Infof("will destroy %s", what)
	if yes {
		return nil
	}
	if f.IO.InTTY {
		if ok, _ := askYes(ctx, f.IO, "destroy?"); ok {
			return nil
		}
		return &CancelledError{Msg: "cancelled — nothing destroyed"}
	}
	return &NeedsApprovalError{Doing: "destroying", Shown: "will be destroyed"}
}

type downResult struct {
	Schema    string                `json:"schema"`
	Destroyed []provider.InstanceID `json:"destroyed_confirmed"`
	// NotFound are requested ids the account does not have ([] when none).
	NotFound  []provider.InstanceID `json:"not_found"`
	Label     string                `json:"label,omitempty"`
	RunID     string                `json:"run_id,omitempty"`
	Simulated bool                  `json:"simulated"`
}

// DownOptions are `vastrun down`'s parsed flags and dependencies.
type DownOptions struct {
	f         *Factory
	Workflow  WorkflowOptions
	Instances []int64
	Label     string
	Settle    time.Duration
	All       bool
}

// NewCmdDown builds `vastrun down`. runF, when set, is called with the
// parsed options instead of runDown (tests check the parsing that way).
func NewCmdDown(f *Factory, runF func(context.Context, *DownOptions) error) *cobra.Command {
	opts := &DownOptions{f: f, Workflow: WorkflowOptions{allowMissingConfigs: true}}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Destroy a run's instances (or --instance / --label) and confirm they are gone",
		Long: `Destroy and confirm: every instance of the current run (or --run), or the
given --instance ids, or every instance carrying --label. Confirmation means
the instance is absent by id or absent from a complete listing of its label;
many are destroyed in bulk (64 ids a call) and confirmed by one listing.
It is idempotent: instances already gone are fine, and an id the account
does not have is reported as not found. When other runs in the state dir
still hold instances, plain 'down' lists them and stops: pass --all for
every run, or --run RUN for one. Exit 7 means some destruction could not be
confirmed.`,
		Example: `  vastrun down --yes
  vastrun down --label vastrun-mx1seio0a3dm-tp9lec-e6b91645 --yes
  vastrun down --instance 30511207 --instance 30511208 --yes
  vastrun down --all --yes`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			if opts.Settle < 0 {
				return &UsageError{Err: fmt.Errorf("--settle %s is negative", opts.Settle), Hint: "write how long listings must stay clean, e.g. --settle 20s"}
			}
			for _, id := range opts.Instances {
				if id <= 0 {
					return &UsageError{Err: fmt.Errorf("--instance %d is not an instance id", id), Hint: "instance ids are positive numbers, as 'vastrun status' or the receipt show them"}
				}
			}
			return nil
		}, runF, runDown),
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir and teardown limit (optional)")
	cmd.Flags().Int64SliceVar(&opts.Instances, "instance", nil, "instance id to destroy (repeatable)")
	cmd.Flags().StringVar(&opts.Label, "label", "", "destroy every instance carrying this label")
	cmd.Flags().DurationVar(&opts.Settle, "settle", lifecycle.SweepSettle, "with --label: how long listings must stay clean before absence is believed (they can lag a fresh rental)")
	cmd.Flags().StringVar(&o.RunID, "run", "", "run id (default: the latest in the state dir)")
	cmd.Flags().BoolVar(&opts.All, "all", false, "destroy the instances of every run in the state dir that still holds any")
	return cmd
}

// runDown destroys what opts target: a run (the latest, --run, or --all)
// or --instance ids and a --label.
func runDown(ctx context.Context, opts *DownOptions) error {
	f, o := opts.f, &opts.Workflow
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	if len(opts.Instances) == 0 && opts.Label == "" {
		if opts.All {
			return downAll(ctx, f, o, cfg)
		}
		if o.RunID == "" {
			if err := refuseOtherLiveRuns(cfg.StateDir); err != nil {
				return err
			}
		}
		dir, err := runDir(cfg.StateDir, o.RunID)
		if err != nil {
			var noRun *NoRunError
			if errors.As(err, &noRun) {
				noRun.Also = "or destroy by id or label, which needs no run: vastrun down --instance ID --yes, or --label LABEL"
				return err
			}
			return &UsageError{Err: err, Hint: "pass --instance ID or --label LABEL"}
		}
		return downRun(ctx, f, o, cfg, dir, opts.Settle)
	}
	return downTargets(ctx, f, o, cfg, opts.Instances, opts.Label, opts.Settle)
}

func printDown(f *Factory, res downResult) error {
	// Lists are lists, [] when empty (docs/json.md), whichever path built res.
	if res.Destroyed == nil {
		res.Destroyed = []provider.InstanceID{}
	}
	if res.NotFound == nil {
		res.NotFound = []provider.InstanceID{}
	}
	if f.JSON {
		return json.NewEncoder(f.IO.Out).Encode(res)
	}
	var b strings.Builder
	for _, id := range res.Destroyed {
		fmt.Fprintf(&b, "destroyed %d (confirmed)\n", id)
	}
	for _, id := range res.NotFound {
		fmt.Fprintf(&b, "not found %d: the account has no such instance, nothing to destroy\n", id)
	}
	if _, err := io.WriteString(f.IO.Out, b.String()); err != nil {
		return err
	}
	if len(res.Destroyed) == 0 && len(res.NotFound) == 0 {
		f.IO.Infof("nothing to destroy")
	}
	return nil
}

func downTargets(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, ids []int64, lbl string, settle time.Duration) error {
	m, err := f.Marketplace(ctx)
	if err != nil {
		return err
	}
	t := janitor.Target(ctx, m, ids) // learn each label so confirmation can list it
	targets, notFound := t.Labels, t.NotFound
	res := downResult{Schema: "vastrun.down/v1", Label: lbl, Simulated: f.Sim, Destroyed: []provider.InstanceID{}, NotFound: []provider.InstanceID{}}
	limit := time.Duration(cfg.Timeouts.Teardown)
	c := lifecycle.Confirmer{Market: m, Clock: f.clock()}
	if lbl != "" {
		// A label sweep: a listing can lag a fresh rental, so vastrun keeps
		// looking until the label has stayed clean for a while.
		if err := confirmDestroy(ctx, f, o.Yes, fmt.Sprintf("every instance labelled %s", lbl)); err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
		defer cancel()
		// The settle is a silent wait otherwise: say what it is for.
		f.IO.Infof("destroying what carries label %s, then watching for %s that listings stay clean (they can lag a fresh rental); limit %s", lbl, settle, limit)
		ids, err := c.SweepLabel(dctx, lbl, f.clock().Now().Add(limit), settle)
		res.Destroyed = append(res.Destroyed, ids...)
		t.Drop(ids)
		if err != nil {
			_ = printDown(f, res) // ce is the error to report (its exit code), as reportRun does
			ce := &lifecycle.CleanupError{Label: lbl, Err: err}
			cienv.Detect(f.Getenv).Annotate(f.IO.ErrOut, "error", f.IO.Redactor().String(ce.Error()))
			return ce
		}
		recordSwept(ctx, f, o, cfg, lbl, ids)
		if len(targets) == 0 {
			return printDown(f, res)
		}
	}
	if len(targets) == 0 {
		return printDown(f, res)
	}
	keys := t.IDs()
	if err := confirmDestroy(ctx, f, o.Yes, fmt.Sprintf("instances %v", keys)); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
	defer cancel()
	deadline := f.clock().Now().Add(limit)
	var failed []provider.InstanceID
	var errs []error
	// Destroyed in bulk, confirmed by one listing of their labels and a
	// read of each id that listing cannot speak for.
	vias, fails := c.DestroyConfirmAll(dctx, targets, deadline)
	for _, id := range keys {
		via, err := vias[id], fails[id]
		if err != nil {
			failed = append(failed, id)
			errs = append(errs, err)
			continue
		}
		if notFound[id] {
			// Destroy was still sent (a fresh rental can lag reads), but
			// nothing by that id existed to destroy.
			res.NotFound = append(res.NotFound, id)
			continue
		}
		f.IO.Infof("instance %d destroyed (confirmed by %s)", id, strings.Join(via, ", "))
		res.Destroyed = append(res.Destroyed, id)
	}
	perr := printDown(f, res)
	if len(failed) > 0 {
		ce := &lifecycle.CleanupError{Label: lbl, Instances: failed, Err: errors.Join(errs...)}
		cienv.Detect(f.Getenv).Annotate(f.IO.ErrOut, "error", f.IO.Redactor().String(ce.Error()))
		return ce // the error to report (its exit code), as reportRun does
	}
	return perr
}

// StatusOptions are `vastrun status`'s parsed flags and dependencies.
type StatusOptions struct {
	f        *Factory
	Workflow WorkflowOptions
	Offline  bool
}

// statusRow is one instance of the run in `status`.
type statusRow struct {
	Instance provider.InstanceID `json:"instance_id"`
	Machine  int64               `json:"machine_id"`
	// Live is the API's actual_status, "gone", or "unknown" (see
	// LiveError); absent with --offline.
	Live      string `json:"live_status,omitempty"`
	LiveError string `json:"live_error,omitempty"`
	Confirmed bool   `json:"destroy_confirmed"`
	Failure   string `json:"failure,omitempty"`
}

// NewCmdStatus builds `vastrun status`; runF as for NewCmdDown.
func NewCmdStatus(f *Factory, runF func(context.Context, *StatusOptions) error) *cobra.Command {
	opts := &StatusOptions{f: f, Workflow: WorkflowOptions{allowMissingConfigs: true}}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the current run (or --run) from its journal, with live instance states",
		Example: "  vastrun status\n  vastrun status --run mx1seio0a3dm --json\n  vastrun status --offline",
		Args:    usageArgs(cobra.NoArgs),
		RunE:    runCmd(opts, nil, runF, runStatus),
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir (optional)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "where run journals live")
	cmd.Flags().StringVar(&o.RunID, "run", "", "run id (default: the latest)")
	cmd.Flags().BoolVar(&opts.Offline, "offline", false, "do not ask the API for live states")
	return cmd
}

func runStatus(ctx context.Context, opts *StatusOptions) error {
	f, o := opts.f, &opts.Workflow
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	dir, err := runDir(cfg.StateDir, o.RunID)
	if err != nil {
		return &UsageError{Err: err}
	}
	st, err := runstate.LoadState(dir)
	if err != nil {
		return err
	}
	var m provider.Marketplace
	if !opts.Offline {
		if m, err = f.Marketplace(ctx); err != nil {
			if errors.Is(err, vast.ErrNoAPIKey) {
				// A --sim run's simulator ended with its command: the
				// journal is all there is to read, and needs no key.
				return &hintedError{err: err, hint: fmt.Sprintf("read what the journal of run %s recorded, without the API: vastrun status --offline", st.RunID)}
			}
			return err
		}
	}
	rows := []statusRow{}
	for _, a := range st.Attempts {
		r := statusRow{Instance: a.InstanceID, Machine: a.MachineID, Confirmed: a.Confirmed, Failure: a.Failure}
		if m != nil && a.InstanceID != 0 {
			r.Live, r.LiveError = janitor.LiveStatus(m.ShowInstance(ctx, a.InstanceID))
		}
		rows = append(rows, r)
	}
	if n := len(rows); n > 0 && m != nil && st.Workflow == "up" && rows[n-1].Live == "running" {
		renewLease(ctx, f, o, cfg, dir)
	}
	if f.JSON {
		un := st.Unconfirmed()
		if un == nil {
			un = []provider.InstanceID{} // a list, [] when none
		}
		// unconfirmed_instance_ids is the receipt's and state.json's name;
		// unconfirmed, the same list, stays: status/v1 promised it.
		return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.status/v1", "run_id": st.RunID, "label": st.Label,
			"workflow": st.Workflow, "outcome": outcomeOrUnfinished(string(st.Outcome)), "instances": rows, "unconfirmed": un, "unconfirmed_instance_ids": un})
	}
	outcome := receipt.Outcome(outcomeOrUnfinished(string(st.Outcome)))
	if _, err := fmt.Fprintf(f.IO.Out, "run %s (%s)  label %s  outcome %s\n", st.RunID, st.Workflow, st.Label, outcome); err != nil {
		return err
	}
	if n := (&receipt.Receipt{RunID: st.RunID, Workflow: st.Workflow, Outcome: outcome}).Next(); n != "" {
		defer f.IO.Infof("next: %s", n)
	}
	var tw strings.Builder
	fmt.Fprintln(&tw, "INSTANCE\tMACHINE\tLIVE\tDESTROYED\tNOTE")
	for _, r := range rows {
		live := text.OrDash(r.Live)
		if r.LiveError != "" {
			live += " (" + r.LiveError + ")"
		}
		fmt.Fprintf(&tw, "%d\t%d\t%s\t%s\t%s\n", r.Instance, r.Machine, live, map[bool]string{true: "confirmed", false: "no"}[r.Confirmed], r.Failure)
	}
	return writeTable(f.IO.Out, tw.String())
}

// renewLease renews the lease of an up rental that status found running:
// its dead-man switch counts the TTL from the last vastrun command. It is
// best effort, and skipped while another command holds the run (that
// command beats the switch itself).
func renewLease(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, dir string) {
	if loc, err := stateLocation(o, cfg); err != nil || loc.Kind == "s3" {
		return // a team's run is opened under its lease: exec and ssh renew it
	}
	m, err := f.Marketplace(ctx)
	if err != nil {
		return
	}
	e := lifecycle.New(&lifecycle.Deps{Market: m, Clock: f.clock(), Log: f.Logger(), UI: f.IO, Getenv: f.Getenv,
		Redactor: f.IO.Redactor(), Config: cfg, StateRoot: cfg.StateDir, APIURL: f.APIURL()})
	if err := e.Open(dir); err != nil {
		f.Logger().Debug("lease not renewed", "err", err) // another command holds the run
		return
	}
	defer e.Close() //nolint:errcheck // releases the journal's lock; nothing was written
	c, inst, err := e.Interactive(ctx)
	if err != nil {
		f.IO.Infof("could not renew the instance's dead-man switch lease: %v", err)
		return
	}
	defer c.Close() //nolint:errcheck // one beat was the point; the connection's end changes nothing
	e.Refresh(ctx, c, inst.ID)()
}

// ReapOptions are `vastrun reap`'s parsed flags and dependencies.
type ReapOptions struct {
	f      *Factory
	Prefix string
	At     string // RFC 3339; "" means now
	Yes    bool
	// Team, with --team, judges by the team bucket (reap_team.go).
	Team *reapTeamOptions
}

// reapLimit bounds the destroys of one reap, like teardown.
const reapLimit = 4 * time.Minute

// NewCmdReap builds `vastrun reap`; runF as for NewCmdDown.
func NewCmdReap(f *Factory, runF func(context.Context, *ReapOptions) error) *cobra.Command {
	opts := &ReapOptions{f: f, Team: &reapTeamOptions{}}
	cmd := &cobra.Command{
		Use:   "reap",
		Short: "Destroy instances whose vastrun label has expired (a dry run unless --yes)",
		Long: `List every instance on the account, keep those whose label is a valid
vastrun label (self-checking, with an expiry) under --label-prefix, and
destroy the expired ones. Needs no state: the label says everything. Without
--yes it only reports.`,
		Example: "  vastrun reap\n  vastrun reap --label-prefix vastrun-acme --yes --json\n  vastrun reap --at 2026-12-24T00:00:00Z\n  vastrun reap --team --state s3://ml-team/vastrun --yes",
		Args:    usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(*cobra.Command, []string) error {
			if opts.Team.team {
				opts.Team.prefix, opts.Team.yes = opts.Prefix, opts.Yes
				return nil
			}
			if opts.At != "" {
				if _, err := time.Parse(time.RFC3339, opts.At); err != nil {
					return &UsageError{Err: fmt.Errorf("--at %q: %w", opts.At, err), Hint: "use RFC 3339, e.g. 2026-12-01T00:00:00Z"}
				}
			}
			return nil
		}, runF, runReap),
	}
	cmd.Flags().StringVar(&opts.Prefix, "label-prefix", label.DefaultPrefix+"-", "only labels starting with this")
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "destroy (default: only report)")
	cmd.Flags().StringVar(&opts.At, "at", "", "judge expiry as of this RFC 3339 time instead of now (to plan ahead)")
	opts.Team.addFlags(cmd)
	return cmd
}

func runReap(ctx context.Context, opts *ReapOptions) error {
	f := opts.f
	if opts.Team.team { // reap_team.go
		return reapTeam(ctx, f, opts.Team)
	}
	m, err := f.Marketplace(ctx)
	if err != nil {
		return err
	}
	list, err := m.ListInstances(ctx, provider.ListOptions{Brief: true}) // ids and labels are all reap reads
	if err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	now := f.clock().Now()
	if opts.At != "" {
		now, _ = time.Parse(time.RFC3339, opts.At) // checked in NewCmdReap
	}
	cands := janitor.Expired(list, opts.Prefix, now)
	var failed []provider.InstanceID
	if opts.Yes {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reapLimit+30*time.Second)
		defer cancel()
		failed = janitor.Reap(dctx, lifecycle.Confirmer{Market: m, Clock: f.clock()}, cands, f.clock().Now().Add(reapLimit))
	}
	var perr error
	if f.JSON {
		perr = json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.reap/v1", "dry_run": !opts.Yes, "scanned": len(list), "expired": cands})
	} else {
		var b strings.Builder
		for _, c := range cands {
			fmt.Fprintf(&b, "%d\t%s\texpired %s\t%s\n", c.ID, c.Label, c.Expiry.Format(time.RFC3339), c.Result)
		}
		_, perr = io.WriteString(f.IO.Out, b.String())
		f.IO.Infof("%d instances scanned, %d with an expired vastrun label%s", len(list), len(cands), map[bool]string{true: "", false: " (dry run: pass --yes to destroy)"}[opts.Yes])
	}
	if len(failed) > 0 {
		// The cleanup error before the printing one (its exit code).
		return &lifecycle.CleanupError{Instances: failed, Err: errors.New("reap could not confirm every destruction")}
	}
	return perr
}

// DoctorOptions are `vastrun doctor`'s parsed flags and dependencies.
type DoctorOptions struct {
	f      *Factory
	Strict bool
}

// NewCmdDoctor builds `vastrun doctor`; runF as for NewCmdDown.
func NewCmdDoctor(f *Factory, runF func(context.Context, *DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{f: f}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the CI context, API reachability and what the key may do",
		Long: `Check that the API answers, which CI system and event this is, and what the
API key may do. A key that can write billing, user or team settings is more
than vastrun needs (misc, user_read, instance_read, instance_write and
billing_read): doctor warns, and with --strict fails with exit 4.`,
		Example: "  vastrun doctor\n  vastrun doctor --strict",
		Args:    usageArgs(cobra.NoArgs),
		RunE:    runCmd(opts, nil, runF, runDoctor),
	}
	cmd.Flags().BoolVar(&opts.Strict, "strict", false, "fail (exit 4) when the key holds risky permissions")
	return cmd
}

func runDoctor(ctx context.Context, opts *DoctorOptions) error {
	f := opts.f
	env := cienv.Detect(f.Getenv)
	system := env.System
	if system == "" {
		system = "none detected"
	}
	f.IO.Infof("CI: %s; event: %s", system, text.OrDash(env.EventName))
	m, err := f.Marketplace(ctx)
	if err != nil {
		return err
	}
	u, err := m.CurrentUser(ctx)
	if errors.Is(err, provider.ErrAuth) {
		// The generic auth hint sends people to doctor: this is doctor.
		return &hintedError{err: err, hint: "check VAST_API_KEY (or ~/.config/vastai/vast_api_key): Vast answers a key it does not know with 404 auth_error; make a new one on the Keys page, https://cloud.vast.ai/manage-keys/"}
	}
	if err != nil {
		return err
	}
	f.IO.Infof("API reachable; account %d (%s), credit $%.2f", u.ID, text.OrDash(u.Username), u.Credit+u.Balance)
	keys, err := m.APIKeys(ctx)
	if err != nil {
		return err
	}
	risky, known := janitor.KeyScope(keys, u.KeyID)
	if !known {
		f.IO.Infof("warning: could not find this key (id %d) among the account's keys; cannot check its permissions", u.KeyID)
	}
	report := map[string]any{"schema": "vastrun.doctor/v1", "ci": env.System, "event": env.EventName, "key_id": u.KeyID, "risky_permissions": risky, "simulated": f.Sim}
	if ro, known := janitor.KeyReadOnly(keys, u.KeyID); known {
		report["read_only"] = ro
		if ro {
			f.IO.Infof("the key is read-only: enough for plan, offers, validate and status; apply and down need instance_write (docs/approval.md)")
		} else {
			f.IO.Infof("the key can rent and destroy: keep it where apply runs, and give agents a read-only key (docs/approval.md)")
		}
	}
	if f.JSON {
		if err := json.NewEncoder(f.IO.Out).Encode(report); err != nil {
			return err
		}
	}
	if len(risky) == 0 {
		f.IO.Infof("key permissions look scoped for CI")
		return nil
	}
	msg := fmt.Sprintf("the API key can do more than vastrun needs: %s", strings.Join(risky, ", "))
	if opts.Strict {
		return &ScopeError{Msg: msg}
	}
	f.IO.Infof("warning: %s", msg)
	f.IO.Hintf("%s", ciKeyHint)
	return nil
}

// ciKeyHint says how to make the key vastrun needs, and where.
const ciKeyHint = `create a key with only what vastrun needs: save {"api": {"misc": {}, "user_read": {}, "instance_read": {}, "instance_write": {}, "billing_read": {}}} as perms.json and run 'vastai create api-key --name vastrun-ci --permission_file perms.json' (or use the Keys page, https://cloud.vast.ai/manage-keys/); then use that key as VAST_API_KEY`

// ScopeError means the key holds more permission than allowed (--strict).
type ScopeError struct{ Msg string }

func (e *ScopeError) Error() string { return e.Msg }

// explainPolicy implements `vastrun offers --policy FILE --explain`.
func explainPolicy(ctx context.Context, f *Factory, path string, limit int) error {
	cfg, err := config.Load(path)
	if err != nil {
		return configError(path, err)
	}
	// As a run would judge: the policy the spec freezes, with its bound on
	// how long the host must stay.
	p := spec.Build(cfg, spec.Facts{}).Policy
	m, err := f.Marketplace(ctx)
	if err != nil {
		return err
	}
	offers, err := m.SearchOffers(ctx, p.LooseQuery(limit))
	if err != nil {
		return err
	}
	chosen, ds := policy.Select(p, offers)
	if f.JSON {
		return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": receipt.ExplainSchema, "simulated": f.Sim, "decisions": receipt.DecisionRows(ds)})
	}
	receipt.WriteExplanation(f.IO.Out, ds)
	if chosen == nil {
		if len(offers) == 0 {
			// Nothing to judge: say whether the models exist at all.
			if _, err := preflight.Market(ctx, m, cfg); err != nil {
				return err
			}
			return &NoOfferError{Msg: fmt.Sprintf("no live offer in %s has the policy's GPU model and count (%s x%d)", path, strings.Join(p.Models, ", "), p.Count)}
		}
		return &NoOfferError{Msg: fmt.Sprintf("none of %d offers meets the policy in %s: %s removed the last ones", len(offers), path, policy.RemovedBy(policy.Funnel(p, offers)))}
	}
	f.IO.Infof("%d offers judged; offer %d would be rented", len(ds), chosen.ID)
	return nil
}
