package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Team state (state: s3://bucket/prefix): the wiring between the flags,
// the engine's journal hook and the lease. See docs/teams.md.

// addTeamFlags adds --state (every workflow command).
func (o *WorkflowOptions) addTeamFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.State, "state", "", "where run state is authoritative: local, or s3://BUCKET/PREFIX shared by a team (default: state in the config, else local)")
}

// addResumeTeamFlags adds the flags only resume needs.
func (o *WorkflowOptions) addResumeTeamFlags(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&o.WaitLease, "wait-lease", 0, "with team state: wait up to this long for another controller's lease to expire or be released, instead of refusing")
}

// stateLocation resolves --state over the config's state key.
func stateLocation(o *WorkflowOptions, cfg *config.Config) (teamstate.Location, error) {
	s := cfg.State
	if o != nil && o.State != "" {
		s = o.State
	}
	l, err := teamstate.ParseLocation(s)
	if err != nil {
		return teamstate.Location{}, &UsageError{Err: err}
	}
	return l, nil
}

// addTeamBucketFlags adds the flags of the commands that work on the team
// bucket alone (budget, runs --all, reap --team): the config, which names
// state: and team.*, and --state over it.
func (o *WorkflowOptions) addTeamBucketFlags(cmd *cobra.Command, fileUsage string) {
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", fileUsage)
	o.addTeamFlags(cmd)
}

// openTeamBucket loads the config (a missing one is the defaults) and
// opens the team bucket that --state or state: names. A local state is
// refused with notTeam (what the command needs the bucket for) and hint.
func (o *WorkflowOptions) openTeamBucket(ctx context.Context, f *Factory, notTeam, hint string) (*config.Config, teamstate.Location, *teamstate.S3, error) {
	o.allowMissingConfigs = true
	cfg, err := o.loadConfig()
	if err != nil {
		return nil, teamstate.Location{}, nil, err
	}
	loc, err := stateLocation(o, cfg)
	if err != nil {
		return nil, teamstate.Location{}, nil, err
	}
	if loc.Kind != "s3" {
		return nil, loc, nil, &UsageError{Err: fmt.Errorf("%s, and the state is local", notTeam), Hint: hint}
	}
	b, err := openTeamBackend(ctx, f, loc)
	if err != nil {
		return nil, loc, nil, err
	}
	return cfg, loc, b, nil
}

// teamStateHint is what a team command run on local state says to do.
const teamStateHint = "pass --state s3://BUCKET/PREFIX, or set state: in the config (docs/teams.md)"

// openTeamBackend opens and, on first use of the endpoint, probes the team
// bucket. A bucket that does not enforce conditional writes is refused.
func openTeamBackend(ctx context.Context, f *Factory, loc teamstate.Location) (*teamstate.S3, error) {
	b, err := teamstate.NewS3(loc.Bucket, loc.Prefix, teamstate.S3Options{Getenv: f.Getenv})
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	cache := teamstate.ProbeCache{Dir: filepath.Join(f.HomeDir, ".cache", "vastrun", "state-probe")}
	v, fresh, err := cache.Verify(ctx, b, b.Endpoint()+"/"+loc.Bucket)
	if errors.Is(err, teamstate.ErrNoConditionalWrites) {
		return nil, &hintedError{err: err, hint: "team state needs a bucket whose server enforces If-None-Match and If-Match; see docs/teams.md for the servers that pass"}
	}
	if err != nil {
		return nil, &hintedError{err: fmt.Errorf("team state %s: %w", loc, err), hint: "check AWS_ENDPOINT_URL_S3 and the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"}
	}
	if fresh && v.OK {
		f.IO.Infof("team state: %s enforces conditional writes (probe passed %d checks; verdict cached)", loc, len(v.Checks))
	}
	return b, nil
}

func leaseOptions(cfg *config.Config) teamstate.LeaseOptions {
	return teamstate.LeaseOptions{TTL: cfg.Team.LeaseTTL.Duration()}
}

func newTeamController(f *Factory, b teamstate.Backend, cfg *config.Config, now func() time.Time) *team.Controller {
	// What the controller copies from the bucket is masked with the run's
	// secrets, as every other file it writes: a resume on this machine
	// may come before any engine has registered them.
	red := f.IO.Redactor()
	for _, name := range cfg.Secrets {
		red.Add(f.Getenv(name))
	}
	return team.New(team.Options{Backend: b, Holder: teamstate.ThisProcess(f.Getenv), Lease: leaseOptions(cfg), UI: f.IO, Now: now, Redactor: red})
}

// attachTeam puts a team-state engine under its lease: the journal goes to
// the bucket first and every mutating marketplace call is fenced. Local
// state leaves the engine as it is.
func attachTeam(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, e *lifecycle.Scope) error {
	loc, err := stateLocation(o, cfg)
	if err != nil || loc.Kind != "s3" {
		return err
	}
	if o.team == nil {
		b, err := openTeamBackend(ctx, f, loc)
		if err != nil {
			return err
		}
		o.team = newTeamController(f, b, cfg, e.Clock.Now)
	}
	ctrl := o.team
	e.JournalHook = ctrl.Hook
	e.Market = ctrl.Fence(e.Market)
	budget := &teamBudget{ctrl: ctrl, infof: f.IO.Infof, limit: cfg.Team.BudgetUSD}
	e.Approve = budget.approve(e.Approve, e.Clock.Now)
	f.onClose(func() { closeTeamRun(f, ctrl, e); budget.settle(e) })
	// A lost or fenced lease ends the command: nothing more may be done on
	// this run here, and whatever is in flight stops at once.
	go func() {
		<-ctrl.Done()
		if !ctrl.Released() && f.stopRun != nil {
			f.stopRun()
		}
	}()
	return nil
}

// closeTeamRun releases the lease of a run that reached an outcome (its
// journal says what is still alive, so `down` or `resume` may take over
// at once); a run without one keeps its lease until it expires, so that
// nobody takes over from a controller that may still be working.
func closeTeamRun(f *Factory, ctrl *team.Controller, e *lifecycle.Scope) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := e.State()
	release := st != nil && st.Outcome != ""
	if err := ctrl.Close(ctx, release); err != nil && release {
		f.IO.Infof("team state: the lease of run %s was not released (%v); it expires by itself", st.RunID, err)
	}
}

// teamRunDir is where resume finds the run: with team state the bucket's
// journal replaces the local cache after the lease is taken.
func teamRunDir(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, id string) (string, error) {
	loc, err := stateLocation(o, cfg)
	if err != nil {
		return "", err
	}
	if loc.Kind != "s3" {
		return runDir(cfg.StateDir, id)
	}
	if id == "" {
		d, err := runDir(cfg.StateDir, "")
		if err != nil {
			return "", &UsageError{Err: fmt.Errorf("resume with team state needs the run id: %w", err), Hint: "list the team's runs with: vastrun runs --all --state " + loc.String()}
		}
		id = filepath.Base(d)
	}
	b, err := openTeamBackend(ctx, f, loc)
	if err != nil {
		return "", err
	}
	// The engine's clock (the simulator's under --sim), read when used:
	// the engine is built after this.
	ctrl := newTeamController(f, b, cfg, func() time.Time { return f.clock().Now() })
	dir, err := ctrl.Resume(ctx, id, cfg.StateDir, o.WaitLease, nil)
	switch {
	case errors.Is(err, teamstate.ErrHeld):
		return "", &hintedError{err: err, hint: "its holder renews the lease while it lives; to take over once it stops, wait for it with --wait-lease DURATION (e.g. --wait-lease 10m)"}
	case errors.Is(err, team.ErrNoRun), errors.Is(err, teamstate.ErrNotExist):
		return "", &UsageError{Err: err, Hint: "list the team's runs with: vastrun runs --all --state " + loc.String()}
	case err != nil:
		return "", err
	}
	o.team = ctrl
	return dir, nil
}

// teamBudget reserves each approval's worst case in the team ledger
// before the person (or --yes) approves, and settles the run at the end.
type teamBudget struct {
	ctrl   *team.Controller
	infof  func(format string, args ...any)
	limit  float64
	period string
	run    string
}

func (t *teamBudget) approve(inner func(lifecycle.Plan) (bool, error), now func() time.Time) func(lifecycle.Plan) (bool, error) {
	return func(p lifecycle.Plan) (bool, error) {
		l := t.ctrl.Lease()
		if l == nil {
			return false, fmt.Errorf("team budget: no lease held")
		}
		ask := p.WorstCase
		if p.CeilingDPH > p.TotalDPH && p.TotalDPH > 0 {
			ask *= p.CeilingDPH / p.TotalDPH // a replacement offer may cost up to the ceiling
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rec := l.Record()
		at := now()
		if err := team.Reserve(ctx, t.ctrl.Backend(), at, rec.Run, rec.Holder.String(), ask, t.limit); err != nil {
			if errors.Is(err, team.ErrOverBudget) {
				return false, &lifecycle.StepError{Step: "approve", Outcome: lifecycle.OutcomeBudget, Err: err}
			}
			return false, fmt.Errorf("team budget: %w", err)
		}
		t.period, t.run = team.Period(at), rec.Run
		ok, err := inner(p)
		if !ok || err != nil {
			// Declined: this approval's reservation goes back (the run may
			// still hold an earlier one, for a rental it had).
			if uerr := team.Unreserve(ctx, t.ctrl.Backend(), t.period, t.run, ask, now()); uerr != nil {
				t.infof("team budget: run %s's declined reservation $%.4f stands (%v)", t.run, ask, uerr)
			}
		}
		return ok, err
	}
}

// settle replaces the run's reservation in the ledger by what it spent,
// once it ended and every rental of it is confirmed destroyed (see
// team.SettlementOf); until then (a kept `up` instance bills on) the
// reservation stands. It stamps the ledger on the engine's clock.
func (t *teamBudget) settle(e *lifecycle.Scope) {
	st := e.State()
	s, ok := team.SettlementOf(st)
	if !ok {
		return
	}
	if t.period == "" {
		// Approved by an earlier process (up, then down): the run's own
		// reservation is in the month it started.
		t.period, t.run = team.Period(st.Started), st.RunID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	settled, err := team.Settle(ctx, t.ctrl.Backend(), t.period, t.run, s, e.Now())
	if err != nil {
		t.infof("team budget: run %s's spend $%.4f was not settled in the ledger (%v); its reservation stands", t.run, s.USD, err)
	}
	if !settled {
		return // refused at approval: it holds nothing
	}
	t.infof("team budget: run %s settled at $%.4f (%s); its reservation is released", t.run, s.USD, s.Basis)
}
