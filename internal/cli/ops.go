package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/ci"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/preflight"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/run"
)

// confirmDestroy asks before destroying, like approver before renting.
func confirmDestroy(f *Factory, yes bool, what string) error {
	f.IO.Infof("will destroy %s", what)
	if yes {
		return nil
	}
	if f.IO.InTTY {
		fmt.Fprint(f.IO.ErrOut, "vastrun: destroy? [y/N] ")
		var answer string
		fmt.Fscanln(f.IO.In, &answer)
		if strings.EqualFold(answer, "y") || strings.EqualFold(answer, "yes") {
			return nil
		}
		return &CancelledError{Msg: "cancelled — nothing destroyed"}
	}
	return run.ErrNeedsApproval
}

type downResult struct {
	Schema    string                `json:"schema"`
	Destroyed []provider.InstanceID `json:"destroyed_confirmed"`
	// NotFound are requested ids the account does not have.
	NotFound  []provider.InstanceID `json:"not_found,omitempty"`
	Label     string                `json:"label,omitempty"`
	RunID     string                `json:"run_id,omitempty"`
	Simulated bool                  `json:"simulated"`
}

// NewCmdDown builds `vastrun down`.
func NewCmdDown(f *Factory) *cobra.Command {
	o := &WorkflowOptions{allowMissingConfigs: true}
	var instances []int64
	var lbl string
	var settle time.Duration
	var all bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Destroy a run's instances (or --instance / --label) and confirm they are gone",
		Long: `Destroy and confirm: every instance of the current run (or --run), or the
given --instance ids, or every instance carrying --label. Confirmation means
the instance is absent by id and absent from a complete listing of its label.
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
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			if settle < 0 {
				return &UsageError{Err: fmt.Errorf("--settle %s is negative", settle), Hint: "write how long listings must stay clean, e.g. --settle 20s"}
			}
			for _, id := range instances {
				if id <= 0 {
					return &UsageError{Err: fmt.Errorf("--instance %d is not an instance id", id), Hint: "instance ids are positive numbers, as 'vastrun status' or the receipt show them"}
				}
			}
			if len(instances) == 0 && lbl == "" {
				if all {
					return downAll(ctx, f, o, cfg)
				}
				if o.RunID == "" {
					if err := refuseOtherLiveRuns(cfg.StateDir); err != nil {
						return err
					}
				}
				dir, err := runDir(cfg.StateDir, o.RunID)
				if err != nil {
					if errors.As(err, new(*NoRunError)) {
						return err
					}
					return &UsageError{Err: err, Hint: "pass --instance ID or --label LABEL"}
				}
				return downRun(ctx, f, o, cfg, dir)
			}
			return downTargets(ctx, f, o, cfg, instances, lbl, settle)
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir and teardown limit (optional)")
	cmd.Flags().Int64SliceVar(&instances, "instance", nil, "instance id to destroy (repeatable)")
	cmd.Flags().StringVar(&lbl, "label", "", "destroy every instance carrying this label")
	cmd.Flags().DurationVar(&settle, "settle", run.SweepSettle, "with --label: how long listings must stay clean before absence is believed (they can lag a fresh rental)")
	cmd.Flags().StringVar(&o.RunID, "run", "", "run id (default: the latest in the state dir)")
	cmd.Flags().BoolVar(&all, "all", false, "destroy the instances of every run in the state dir that still holds any")
	return cmd
}

func printDown(f *Factory, res downResult) {
	if f.JSON {
		json.NewEncoder(f.IO.Out).Encode(res)
		return
	}
	for _, id := range res.Destroyed {
		fmt.Fprintf(f.IO.Out, "destroyed %d (confirmed)\n", id)
	}
	for _, id := range res.NotFound {
		fmt.Fprintf(f.IO.Out, "not found %d: the account has no such instance, nothing to destroy\n", id)
	}
	if len(res.Destroyed) == 0 && len(res.NotFound) == 0 {
		f.IO.Infof("nothing to destroy")
	}
}

func downTargets(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, ids []int64, lbl string, settle time.Duration) error {
	m, err := f.Marketplace(ctx)
	if err != nil {
		return err
	}
	targets := map[provider.InstanceID]string{}
	for _, id := range ids {
		targets[provider.InstanceID(id)] = ""
	}
	notFound := map[provider.InstanceID]bool{}
	for id, l := range targets {
		if l == "" { // learn the label so confirmation can list it
			in, err := m.ShowInstance(ctx, id)
			switch {
			case err == nil:
				targets[id] = in.Label
			case errors.Is(err, provider.ErrNotFound):
				notFound[id] = true
			}
		}
	}
	res := downResult{Schema: "vastrun.down/v1", Label: lbl, Simulated: f.Sim, Destroyed: []provider.InstanceID{}, NotFound: []provider.InstanceID{}}
	limit := time.Duration(cfg.Timeouts.Teardown)
	c := run.Confirmer{Market: m, Clock: f.clock()}
	if lbl != "" {
		// A label sweep: a listing can lag a fresh rental, so vastrun keeps
		// looking until the label has stayed clean for a while.
		if err := confirmDestroy(f, o.Yes, fmt.Sprintf("every instance labelled %s", lbl)); err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
		defer cancel()
		// The settle is a silent wait otherwise: say what it is for.
		f.IO.Infof("destroying what carries label %s, then watching for %s that listings stay clean (they can lag a fresh rental); limit %s", lbl, settle, limit)
		ids, err := c.SweepLabel(dctx, lbl, f.clock().Now().Add(limit), settle)
		res.Destroyed = append(res.Destroyed, ids...)
		for _, id := range ids {
			delete(targets, id)
		}
		if err != nil {
			printDown(f, res)
			ce := &run.CleanupError{Label: lbl, Err: err}
			ci.Detect(f.Getenv).Annotate(f.IO.ErrOut, "error", f.IO.Redactor().String(ce.Error()))
			return ce
		}
		recordSwept(ctx, f, o, cfg, lbl, ids)
		if len(targets) == 0 {
			printDown(f, res)
			return nil
		}
	}
	if len(targets) == 0 {
		printDown(f, res)
		return nil
	}
	keys := make([]provider.InstanceID, 0, len(targets))
	for id := range targets {
		keys = append(keys, id)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	if err := confirmDestroy(f, o.Yes, fmt.Sprintf("instances %v", keys)); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
	defer cancel()
	deadline := f.clock().Now().Add(limit)
	var failed []provider.InstanceID
	var errs []error
	for _, id := range keys {
		via, err := c.DestroyConfirm(dctx, id, targets[id], deadline)
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
	printDown(f, res)
	if len(failed) > 0 {
		ce := &run.CleanupError{Label: lbl, Instances: failed, Err: errors.Join(errs...)}
		ci.Detect(f.Getenv).Annotate(f.IO.ErrOut, "error", f.IO.Redactor().String(ce.Error()))
		return ce
	}
	return nil
}

// NewCmdStatus builds `vastrun status`.
func NewCmdStatus(f *Factory) *cobra.Command {
	o := &WorkflowOptions{allowMissingConfigs: true}
	var offline bool
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the current run (or --run) from its journal, with live instance states",
		Example: "  vastrun status\n  vastrun status --run mx1seio0a3dm --json\n  vastrun status --offline",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			dir, err := runDir(cfg.StateDir, o.RunID)
			if err != nil {
				return &UsageError{Err: err}
			}
			st, err := run.LoadState(dir)
			if err != nil {
				return err
			}
			type row struct {
				Instance provider.InstanceID `json:"instance_id"`
				Machine  int64               `json:"machine_id"`
				// Live is the API's actual_status, "gone", or "unknown" (see
				// LiveError); absent with --offline.
				Live      string `json:"live_status,omitempty"`
				LiveError string `json:"live_error,omitempty"`
				Confirmed bool   `json:"destroy_confirmed"`
				Failure   string `json:"failure,omitempty"`
			}
			rows := []row{}
			var m provider.Marketplace
			if !offline {
				m, err = f.Marketplace(cmd.Context())
				if err != nil {
					return err
				}
			}
			for _, a := range st.Attempts {
				r := row{Instance: a.InstanceID, Machine: a.MachineID, Confirmed: a.Confirmed, Failure: a.Failure}
				if m != nil && a.InstanceID != 0 {
					in, err := m.ShowInstance(cmd.Context(), a.InstanceID)
					switch {
					case errors.Is(err, provider.ErrNotFound):
						r.Live = "gone"
					case err != nil:
						r.Live, r.LiveError = "unknown", err.Error()
					default:
						r.Live = in.ActualStatus
					}
				}
				rows = append(rows, r)
			}
			if f.JSON {
				return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.status/v1", "run_id": st.RunID, "label": st.Label,
					"workflow": st.Workflow, "outcome": outcomeOrUnfinished(st.Outcome), "instances": rows, "unconfirmed": st.Unconfirmed()})
			}
			fmt.Fprintf(f.IO.Out, "run %s (%s)  label %s  outcome %s\n", st.RunID, st.Workflow, st.Label, orDash(st.Outcome))
			tw := tabwriter.NewWriter(f.IO.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INSTANCE\tMACHINE\tLIVE\tDESTROYED\tNOTE")
			for _, r := range rows {
				live := orDash(r.Live)
				if r.LiveError != "" {
					live += " (" + r.LiveError + ")"
				}
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", r.Instance, r.Machine, live, map[bool]string{true: "confirmed", false: "no"}[r.Confirmed], r.Failure)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file for the state dir (optional)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "where run journals live")
	cmd.Flags().StringVar(&o.RunID, "run", "", "run id (default: the latest)")
	cmd.Flags().BoolVar(&offline, "offline", false, "do not ask the API for live states")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// NewCmdReap builds `vastrun reap`.
func NewCmdReap(f *Factory) *cobra.Command {
	var prefix, at string
	var yes bool
	cmd := &cobra.Command{
		Use:   "reap",
		Short: "Destroy instances whose vastrun label has expired (a dry run unless --yes)",
		Long: `List every instance on the account, keep those whose label is a valid
vastrun label (self-checking, with an expiry) under --label-prefix, and
destroy the expired ones. Needs no state: the label says everything. Without
--yes it only reports.`,
		Example: "  vastrun reap\n  vastrun reap --label-prefix vastrun-acme --yes --json\n  vastrun reap --at 2026-12-24T00:00:00Z",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			m, err := f.Marketplace(ctx)
			if err != nil {
				return err
			}
			list, err := m.ListInstances(ctx, provider.ListOptions{})
			if err != nil {
				return fmt.Errorf("reap: %w", err)
			}
			now := f.clock().Now()
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return &UsageError{Err: fmt.Errorf("--at %q: %w", at, err), Hint: "use RFC 3339, e.g. 2026-12-01T00:00:00Z"}
				}
				now = t
			}
			type cand struct {
				ID     provider.InstanceID `json:"instance_id"`
				Label  string              `json:"label"`
				Expiry time.Time           `json:"expired_at"`
				Result string              `json:"result"`
			}
			var cands []cand
			for _, in := range list {
				l, err := label.Parse(in.Label)
				if err != nil || !strings.HasPrefix(in.Label, prefix) || !l.Expired(now) {
					continue
				}
				cands = append(cands, cand{ID: in.ID, Label: in.Label, Expiry: l.Expiry, Result: "would destroy (dry run)"})
			}
			var failed []provider.InstanceID
			if yes {
				c := run.Confirmer{Market: m, Clock: f.clock()}
				limit := 4 * time.Minute
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
				defer cancel()
				for i := range cands {
					if _, err := c.DestroyConfirm(dctx, cands[i].ID, cands[i].Label, f.clock().Now().Add(limit)); err != nil {
						cands[i].Result = "NOT confirmed: " + err.Error()
						failed = append(failed, cands[i].ID)
					} else {
						cands[i].Result = "destroyed (confirmed)"
					}
				}
			}
			if f.JSON {
				if cands == nil {
					cands = []cand{}
				}
				json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.reap/v1", "dry_run": !yes, "scanned": len(list), "expired": cands})
			} else {
				for _, c := range cands {
					fmt.Fprintf(f.IO.Out, "%d\t%s\texpired %s\t%s\n", c.ID, c.Label, c.Expiry.Format(time.RFC3339), c.Result)
				}
				f.IO.Infof("%d instances scanned, %d with an expired vastrun label%s", len(list), len(cands), map[bool]string{true: "", false: " (dry run: pass --yes to destroy)"}[yes])
			}
			if len(failed) > 0 {
				return &run.CleanupError{Instances: failed, Err: errors.New("reap could not confirm every destruction")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "label-prefix", label.DefaultPrefix+"-", "only labels starting with this")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "destroy (default: only report)")
	cmd.Flags().StringVar(&at, "at", "", "judge expiry as of this RFC 3339 time instead of now (to plan ahead)")
	return cmd
}

// riskyCategories are permissions a CI key should not hold.
var riskyCategories = []string{"billing_write", "user_write", "team_write", "machine_write"}

// NewCmdDoctor builds `vastrun doctor`.
func NewCmdDoctor(f *Factory) *cobra.Command {
	var strict bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the CI context, API reachability and what the key may do",
		Long: `Check that the API answers, which CI system and event this is, and what the
API key may do. A key that can write billing, user or team settings is more
than vastrun needs (misc, user_read, instance_read, instance_write and
billing_read): doctor warns, and with --strict fails with exit 4.`,
		Example: "  vastrun doctor\n  vastrun doctor --strict",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			env := ci.Detect(f.Getenv)
			system := env.System
			if system == "" {
				system = "none detected"
			}
			f.IO.Infof("CI: %s; event: %s", system, orDash(env.EventName))
			m, err := f.Marketplace(ctx)
			if err != nil {
				return err
			}
			u, err := m.CurrentUser(ctx)
			if err != nil {
				return err
			}
			f.IO.Infof("API reachable; account %d (%s), credit $%.2f", u.ID, orDash(u.Username), u.Credit+u.Balance)
			keys, err := m.APIKeys(ctx)
			if err != nil {
				return err
			}
			var mine *provider.APIKeyInfo
			for i := range keys {
				if keys[i].ID == u.KeyID {
					mine = &keys[i]
				}
			}
			var risky []string
			switch {
			case mine == nil:
				f.IO.Infof("warning: could not find this key (id %d) among the account's keys; cannot check its permissions", u.KeyID)
			case mine.Full:
				risky = append(risky, "full access (including billing and account settings)")
			default:
				for _, c := range riskyCategories {
					if _, ok := mine.Permissions[c]; ok {
						risky = append(risky, c)
					}
				}
			}
			report := map[string]any{"schema": "vastrun.doctor/v1", "ci": env.System, "event": env.EventName, "key_id": u.KeyID, "risky_permissions": risky, "simulated": f.Sim}
			if f.JSON {
				json.NewEncoder(f.IO.Out).Encode(report)
			}
			if len(risky) == 0 {
				f.IO.Infof("key permissions look scoped for CI")
				return nil
			}
			msg := fmt.Sprintf("the API key can do more than vastrun needs: %s", strings.Join(risky, ", "))
			if strict {
				return &ScopeError{Msg: msg}
			}
			f.IO.Infof("warning: %s", msg)
			f.IO.Hintf(`create a CI key with {"api": {"misc": {}, "user_read": {}, "instance_read": {}, "instance_write": {}, "billing_read": {}}}`)
			return nil
		},
	}
	cmd.Flags().BoolVar(&strict, "strict", false, "fail (exit 4) when the key holds risky permissions")
	return cmd
}

// ScopeError means the key holds more permission than allowed (--strict).
type ScopeError struct{ Msg string }

func (e *ScopeError) Error() string { return e.Msg }

// explainPolicy implements `vastrun offers --policy FILE --explain`.
func explainPolicy(ctx context.Context, f *Factory, path string, limit int) error {
	cfg, err := config.Load(path)
	if err != nil {
		return &UsageError{Err: err}
	}
	p := cfg.Policy()
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
		return json.NewEncoder(f.IO.Out).Encode(map[string]any{"schema": "vastrun.explain/v1", "simulated": f.Sim, "decisions": run.DecisionRows(ds)})
	}
	run.WriteExplanation(f.IO.Out, ds)
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
