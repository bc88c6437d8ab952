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

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// reapTeamOptions are the flags of `vastrun reap --team`.
type reapTeamOptions struct {
	wf     WorkflowOptions
	team   bool
	prefix string
	grace  time.Duration
	yes    bool
}

func (o *reapTeamOptions) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&o.team, "team", false, "judge every instance of the account by its label and the team bucket's state (state: s3://...): destroy only orphans of ended or abandoned runs, after taking their lease")
	fl.DurationVar(&o.grace, "grace", 5*time.Minute, "with --team: leave instances younger than this alone (a run may not have written its state yet)")
	o.wf.addTeamBucketFlags(cmd, "with --team: config file (for state: and team.lease_ttl)")
}

// reapTeam classifies every instance of the account by label and bucket
// state and destroys the orphans (with --yes), each after taking its run's
// lease over. Any other verdict, unknown included, is left alone.
func reapTeam(ctx context.Context, f *Factory, o *reapTeamOptions) error {
	cfg, loc, b, err := o.wf.openTeamBucket(ctx, f, "reap --team judges instances by the team bucket", "pass --state s3://BUCKET/PREFIX, or use plain 'vastrun reap' (label expiry only)")
	if err != nil {
		return err
	}
	m, err := f.Marketplace(ctx)
	if err != nil {
		return err
	}
	list, err := m.ListInstances(ctx, provider.ListOptions{})
	if err != nil {
		return fmt.Errorf("reap --team: list instances: %w", err)
	}
	clk := f.clock()
	js := team.Classify(ctx, b, list, o.prefix, o.grace, clk.Now())
	var failed []provider.InstanceID
	for i := range js {
		j := &js[i]
		if j.Verdict != team.VerdictOrphan {
			j.Result = "left alone"
			continue
		}
		if !o.yes {
			j.Result = "would destroy (dry run)"
			continue
		}
		ctrl, err := team.TakeOver(ctx, b, teamstate.ThisProcess(f.Getenv), j.Run, leaseOptions(cfg), clk.Now)
		if err != nil {
			// Someone took the run meanwhile, or the bucket failed: not ours to act on now.
			j.Verdict, j.Result = team.VerdictUnknown, "left alone: could not take the run's lease: "+err.Error()
			continue
		}
		// The destroy is journaled in the run's own journal, so its
		// summary (runs --all) stops listing the instance as live.
		onIntent, onDone := ctrl.Reaper()
		c := lifecycle.Confirmer{Market: ctrl.Fence(m), Clock: clk, OnIntent: onIntent, OnDone: onDone}
		limit := 4 * time.Minute
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
		via, derr := c.DestroyConfirm(dctx, j.Instance, j.Label, clk.Now().Add(limit))
		cancel()
		if jerr := ctrl.Reaped(j.Instance, via, derr); jerr != nil {
			f.IO.Infof("reap --team: run %s's journal does not record instance %d's destruction (%v); its listing may still show it", j.Run, j.Instance, jerr)
		}
		// The run's last instance gone: the run has ended, and its
		// reservation in the team budget is released.
		if s, settled, serr := ctrl.SettleReaped(ctx); serr != nil {
			f.IO.Infof("reap --team: run %s's spend was not settled in the team ledger (%v); its reservation stands", j.Run, serr)
		} else if settled {
			j.Settled = &s
			f.IO.Infof("team budget: run %s settled at $%.4f (%s); its reservation is released", j.Run, s.USD, s.Basis)
		}
		if cerr := ctrl.Close(ctx, true); cerr != nil {
			f.IO.Infof("reap --team: run %s's lease was not released (%v); it expires by itself", j.Run, cerr)
		}
		if derr != nil {
			j.Result = "NOT confirmed: " + derr.Error()
			failed = append(failed, j.Instance)
		} else {
			j.Result = "destroyed (confirmed), after taking the run's lease"
		}
	}
	var perr error
	if f.JSON {
		if js == nil {
			js = []team.Judgement{}
		}
		enc := json.NewEncoder(f.IO.Out)
		enc.SetIndent("", "  ")
		perr = enc.Encode(map[string]any{"schema": "vastrun.reap.team", "v": 1, "dry_run": !o.yes, "state": loc.String(), "scanned": len(list), "instances": js})
	} else {
		var out strings.Builder
		for _, j := range js {
			fmt.Fprintf(&out, "%d\t%s\t%s\t%s\t%s\n", j.Instance, dashIfEmpty(j.Label), j.Verdict, j.Reason, j.Result)
		}
		_, perr = io.WriteString(f.IO.Out, out.String())
		f.IO.Infof("%d instances scanned%s", len(list), map[bool]string{true: "", false: " (dry run: pass --yes to destroy the orphans)"}[o.yes])
	}
	if len(failed) > 0 {
		// The cleanup error before the printing one (its exit code).
		return &lifecycle.CleanupError{Instances: failed, Err: errors.New("reap --team could not confirm every destruction")}
	}
	return perr
}
