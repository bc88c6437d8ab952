package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/text"
)

// The dead-man switch: no rental outlives its controller. Every rental is
// armed right after it is verified — by the DeadMan step, which a flow
// must list right after Provision (Execute refuses one that does not:
// ErrNoDeadMan), or by Attach for a workflow that attaches its instances
// itself (train) — and the controller beats it while it holds the
// instance. A controller that dies for any reason leaves the instance to
// destroy itself with its own key once the TTL passes (internal/agent,
// deadman.go), and the instance keeps destroying until Vast says it is
// gone. For `up` the TTL is a lease that exec, ssh and status renew.

const stepDeadMan = runstate.StepDeadMan

// ErrNoDeadMan means a flow rents without arming the dead-man switch
// right after: Provision must be followed by DeadMan (see Rent).
var ErrNoDeadMan = errors.New("a workflow that provisions must arm the dead-man switch right after (lifecycle.Rent)")

// DeadMan arms the dead-man switch on the instance Provision connected to
// and beats it until the run ends (settle stops the beats first, so a
// teardown that cannot confirm still has the switch behind it).
var DeadMan Step = everyStep{stepDeadMan, deadManStep}

// Rent is how a flow rents: Provision, then DeadMan.
func Rent() []Step { return []Step{Provision, DeadMan} }

// checkDeadMan refuses a flow whose Provision is not followed by DeadMan.
func checkDeadMan(f Flow) error {
	for i, st := range f.Steps {
		if st.Name() == Provision.Name() && (i+1 == len(f.Steps) || f.Steps[i+1].Name() != DeadMan.Name()) {
			return fmt.Errorf("workflow %s: %w", f.Name, ErrNoDeadMan)
		}
	}
	return nil
}

// Switch is the on-instance dead-man switch as the controller drives it;
// nil in Deps is the real one (this vastrun, copied to the instance).
type Switch interface {
	// Arm arms the switch on instance inst (installing it first), or with
	// req.Refresh only beats an armed one.
	Arm(ctx context.Context, c *remote.Client, inst provider.InstanceID, req agent.ArmRequest) (agent.ArmResult, error)
	// OpenHeartbeat opens the channel the controller beats over.
	OpenHeartbeat(ctx context.Context, c *remote.Client, inst provider.InstanceID) (agent.HeartbeatPipe, error)
}

// switches is the run's view of its armed switches.
type switches struct {
	armed map[provider.InstanceID]agent.ArmResult
	stop  func() // the DeadMan step's beats
}

// agentSwitch is the real switch: the vastrun binary at bin, copied to
// agent.Binary on the instance, answering `agent call`.
type agentSwitch struct {
	bin    string
	redact func(string) string
}

func (a agentSwitch) client(c *remote.Client, inst provider.InstanceID) *agent.Client {
	return &agent.Client{R: c, Bin: agent.Binary, Instance: fmt.Sprintf("instance %d", inst), Redact: a.redact}
}

func (a agentSwitch) Arm(ctx context.Context, c *remote.Client, inst provider.InstanceID, req agent.ArmRequest) (agent.ArmResult, error) {
	if !req.Refresh {
		if err := installAgent(ctx, c, a.bin); err != nil {
			return agent.ArmResult{}, fmt.Errorf("copy the agent to instance %d: %w", inst, err)
		}
	}
	return a.client(c, inst).Arm(ctx, req)
}

func (a agentSwitch) OpenHeartbeat(ctx context.Context, c *remote.Client, inst provider.InstanceID) (agent.HeartbeatPipe, error) {
	return a.client(c, inst).OpenHeartbeat(ctx, c)
}

// installAgent copies bin to the instance unless it is there already (a
// controller re-attaching, or training's own copy).
func installAgent(ctx context.Context, c *remote.Client, bin string) error {
	err := c.Run(ctx, remote.Command{Script: `[ -x ` + agent.Binary + ` ]`})
	var ee *remote.ExitError
	if err == nil || !errors.As(err, &ee) || ee.Code != 1 {
		return err
	}
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := c.Run(ctx, remote.Command{Script: "mkdir -p " + filepath.Dir(agent.Binary)}); err != nil {
		return err
	}
	return c.UploadContext(ctx, bin, agent.Binary, nil)
}

func (e *Run) deadManSwitch() Switch {
	if e.Switch != nil {
		return e.Switch
	}
	var red func(string) string
	if e.Redactor != nil {
		red = e.Redactor.String
	}
	return agentSwitch{bin: e.AgentBinary, redact: red}
}

// deadManSettings are the switch's TTL and the run's bound: the frozen
// TTL (a workflow's Spec may set its own: training keeps
// train.heartbeat_ttl), and the run's deadlines — ready, the work's bound,
// teardown — counted from arming; no bound for a kept rental (up), whose
// TTL is its lease, nor for open-ended work.
func deadManSettings(e *Scope) (ttl, bound time.Duration) {
	m := e.Frozen()
	if ttl = frozenDuration(m.HeartbeatTTL); ttl <= 0 {
		ttl = config.DefaultHeartbeatTTL
	}
	if e.workflow().Keep {
		return ttl, 0
	}
	if _, work := e.workflow().workPhase(m); work > 0 {
		bound = e.readyDeadline() + work + e.TeardownLimit()
	}
	return ttl, bound
}

// DeadManPlan is the switch as the plan shows it.
type DeadManPlan struct {
	TTL   time.Duration `json:"ttl"`
	Bound time.Duration `json:"bound,omitempty"`
	Lease bool          `json:"lease,omitempty"` // up: the TTL is renewed by vastrun commands
}

// Lines are the plan's words about the switch, for people.
func (d *DeadManPlan) Lines() []string {
	if d == nil {
		return nil
	}
	if d.Lease {
		return []string{fmt.Sprintf("dead-man switch: the instance destroys itself %s after a vastrun command last touched it (exec, ssh and status do; up --ttl)", d.TTL)}
	}
	l := fmt.Sprintf("dead-man switch: the instance destroys itself if this controller is not heard from for %s", d.TTL)
	if d.Bound > 0 {
		l += fmt.Sprintf(", and %s after it is armed in any case", d.Bound.Round(time.Second))
	}
	return []string{l}
}

func deadManPlan(e *Scope) *DeadManPlan {
	ttl, bound := deadManSettings(e)
	return &DeadManPlan{TTL: ttl, Bound: bound, Lease: e.workflow().Keep}
}

func deadManStep(ctx context.Context, e *Scope) error {
	if err := armSwitch(ctx, e, e.Conn, e.Inst.ID); err != nil {
		return err
	}
	e.sw.stopBeats()
	e.sw.stop = e.KeepAlive(ctx, e.Conn, e.Inst.ID)
	return nil
}

// stopBeats ends the DeadMan step's beats, if any.
func (sw *switches) stopBeats() {
	if sw.stop != nil {
		sw.stop()
		sw.stop = nil
	}
}

// armSwitch arms the switch on inst and journals it. A transport failure
// is tried again while the API says the instance runs, until the ready
// deadline (then it is ErrNoAnswer, as for the verify probe); an answer in
// another protocol is final.
func armSwitch(ctx context.Context, e *Scope, c *remote.Client, inst provider.InstanceID) error {
	ttl, bound := deadManSettings(e)
	req := agent.ArmRequest{TTL: agent.Duration(ttl), Bound: agent.Duration(bound), APIURL: e.APIURL, Run: e.state.RunID}
	var res agent.ArmResult
	var stopped string
	err := poll.Until(ctx, e.Clock, poll.Policy{Initial: time.Second, Max: 10 * time.Second, Jitter: e.jitter(), Deadline: e.Now().Add(e.readyDeadline()),
		Permanent: func(err error) bool {
			return stopped != "" || errors.Is(err, agent.ErrSchema) || errors.Is(err, agent.ErrRequest) ||
				errors.Is(err, remote.ErrHostKeyChanged) || errors.Is(err, remote.ErrClosed) || cannotRun(err)
		}},
		func(ctx context.Context) (bool, error) {
			r, err := e.deadManSwitch().Arm(ctx, c, inst, req)
			if err == nil {
				res = r
				return true, nil
			}
			e.Log.Debug("arming the dead-man switch failed", "instance", inst, "err", err)
			switch cur, aerr := e.Market.ShowInstance(ctx, inst); {
			case errors.Is(aerr, provider.ErrNotFound):
				stopped = "the instance is gone"
			case aerr == nil && !cur.Running():
				stopped = "the instance is no longer running (" + text.OrDash(InterruptionReason(cur)) + ")"
			}
			return false, err
		})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err()
	case stopped != "" || remote.Lost(err):
		return &StepError{Step: stepDeadMan, Instance: inst, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("%w to arm the dead-man switch: %s: %w", ErrNoAnswer, text.OrDash(stopped), err)}
	default:
		return &StepError{Step: stepDeadMan, Instance: inst, Err: fmt.Errorf("arm the dead-man switch: %w", err)}
	}
	if e.sw.armed == nil {
		e.sw.armed = map[provider.InstanceID]agent.ArmResult{}
	}
	e.sw.armed[inst] = res
	d := runstate.DeadManData{Instance: inst, TTL: time.Duration(res.TTL).String(), BeatEvery: time.Duration(res.BeatEvery).String(), ClockSpeed: res.ClockSpeed}
	if res.Bound > 0 {
		d.Bound = time.Duration(res.Bound).String()
	}
	if err := e.Record("event", stepDeadMan, d); err != nil {
		return err
	}
	words := "this controller"
	if e.workflow().Keep {
		words = "a vastrun command"
	}
	sim := ""
	if res.ClockSpeed > 1 {
		sim = fmt.Sprintf(" (the simulator's time, at %gx)", res.ClockSpeed)
	}
	e.Infof("dead-man switch armed on instance %d: it destroys itself %s%s after %s was last heard from", inst, time.Duration(res.TTL), sim, words)
	return nil
}

// cannotRun says the instance's shell could not run the agent (126: not
// executable, 127: not found, as a binary without its loader is): no
// retry runs it.
func cannotRun(err error) bool {
	var ee *remote.ExitError
	return errors.As(err, &ee) && (ee.Code == 126 || ee.Code == 127)
}

// Attach is attach, then the switch armed on the instance: every rental a
// workflow attaches itself is armed too.
func (e *Scope) Attach(ctx context.Context, exclude []int64) (*remote.Client, provider.Instance, error) {
	c, inst, err := attach(ctx, e, exclude)
	if err != nil {
		return c, inst, err
	}
	if err := armSwitch(ctx, e, c, inst.ID); err != nil {
		c.Close() //nolint:errcheck // the run fails with the arm's error
		return nil, inst, err
	}
	return c, inst, nil
}

// KeepAlive beats the switch armed on instance id over c until stop is
// called (or ctx ends). The beats run on the wall clock, as the agent
// asked (BeatEvery), whatever the run's clock is. An instance with no
// armed switch is not beaten.
func (e *Scope) KeepAlive(ctx context.Context, c *remote.Client, id provider.InstanceID) (stop func()) {
	res, ok := e.sw.armed[id]
	if !ok || !res.Armed || res.BeatEvery <= 0 || c == nil {
		return func() {}
	}
	sw := e.deadManSwitch()
	h := &agent.Heartbeater{
		Every: time.Duration(res.BeatEvery),
		Clock: clock.Real{},
		Open:  func(ctx context.Context) (agent.HeartbeatPipe, error) { return sw.OpenHeartbeat(ctx, c, id) },
		Logf: func(format string, args ...any) {
			e.Log.Debug("heartbeat", "instance", id, "detail", e.Redactor.String(fmt.Sprintf(format, args...)))
		},
	}
	h.Start(ctx)
	return func() {
		st := h.Stop()
		e.Log.Debug("heartbeat stopped", "instance", id, "beats", st.Beats, "failed", st.Failed, "sessions", st.Sessions)
		if err := h.Err(); err != nil {
			e.Infof("the dead-man switch on instance %d speaks another protocol: %v", id, err)
		}
	}
}

// Refresh tells the switch on instance id that a vastrun command uses the
// instance (exec, ssh, status on an up rental), and keeps telling it until
// stop. An instance without an armed switch (rented before there was one,
// or not by vastrun) is left as it is.
func (e *Scope) Refresh(ctx context.Context, c *remote.Client, id provider.InstanceID) (stop func()) {
	res, err := e.deadManSwitch().Arm(ctx, c, id, agent.ArmRequest{Refresh: true})
	if err != nil || !res.Armed {
		e.Log.Debug("no dead-man switch refreshed", "instance", id, "err", err)
		return func() {}
	}
	if e.sw.armed == nil {
		e.sw.armed = map[provider.InstanceID]agent.ArmResult{}
	}
	e.sw.armed[id] = res
	e.Infof("dead-man switch on instance %d renewed: it destroys itself %s after the last vastrun command", id, time.Duration(res.TTL))
	return e.KeepAlive(ctx, c, id)
}
