package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/text"
)

// The readiness poll's cadence on the API: the first wait, its growth, and
// its cap while "loading" (the state right before "running": every second
// between running and noticing is billed) and otherwise.
const (
	readyPollInitial = 2 * time.Second
	readyPollFactor  = 1.5
	readyPollLoading = 5 * time.Second
	readyPollMax     = 15 * time.Second
)

// probeEvery is how often, on the run's clock, SSH is dialled while an
// instance that publishes its SSH address is not yet running. A dial is a
// connection to the instance, not an API call, so it is neither billed nor
// rate-limited, and the test can start within this of the container's
// sshd answering instead of within a poll interval of the API saying so.
const probeEvery = 250 * time.Millisecond

// probeDialTimeout bounds one probe dial (wall time: it bounds a network
// peer's silence), so a host that holds connections open cannot hold up
// the API poll for long.
const probeDialTimeout = 2 * time.Second

// waitReady watches instance id until it runs with SSH published, fails
// terminally, or the deadline passes. The API, polled with adaptive,
// jittered intervals, is the authority on its state: only a "running" it
// reports ends the wait as ready, and only what it reports fails it. While
// the instance is not yet running but publishes its SSH address, its SSH
// is also dialled every probeEvery with the run's key (sshProbe); when the
// sshd answers, the API is asked at once rather than at the next poll.
// The probe's connection is returned when there is one, so connect has
// nothing left to dial; nil otherwise.
func waitReady(ctx context.Context, e *Scope, id provider.InstanceID, deadline time.Time) (provider.Instance, *remote.Client, error) {
	w := &readyWait{e: e, id: id, start: e.Now(), probe: &sshProbe{e: e, id: id}}
	inst, err := w.run(ctx, deadline)
	if err != nil {
		w.probe.close()
		return inst, nil, err
	}
	if err := e.Record("done", stepReady, runstate.InstanceData{Instance: id}); err != nil {
		w.probe.close()
		return inst, nil, err
	}
	return inst, w.probe.client, nil
}

// readyWait is one readiness wait's state between polls.
type readyWait struct {
	e            *Scope
	id           provider.InstanceID
	start        time.Time
	probe        *sshProbe
	inst         provider.Instance
	last         string // the last status shown to the user
	createdSince time.Time
	// The pull's progress: its last status message while loading, and
	// since when it has been that.
	pullMsg   string
	pullSince time.Time
}

func (w *readyWait) run(ctx context.Context, deadline time.Time) (provider.Instance, error) {
	e := w.e
	wait := readyPollInitial
	var nextShow time.Time // zero: ask the API now
	for {
		if err := ctx.Err(); err != nil {
			return w.inst, err
		}
		if now := e.Now(); now.Before(nextShow) && w.probe.armed() && w.probe.try(ctx) {
			nextShow = now // the sshd answers: ask the API now
		}
		if now := e.Now(); !now.Before(nextShow) || !now.Before(deadline) { // the deadline gets a last look
			done, err := w.observe(ctx)
			if done {
				return w.inst, err
			}
			if err != nil && (errors.Is(err, provider.ErrAuth) || poll.IsPermanent(err)) {
				return w.inst, err
			}
			limit := readyPollMax
			if w.inst.ActualStatus == "loading" {
				limit = readyPollLoading
			}
			next := min(wait, limit)
			throttled := errors.Is(err, provider.ErrRateLimited)
			if throttled {
				next = min(2*wait, 2*readyPollMax)
				wait = next
			} else {
				wait = min(time.Duration(float64(next)*readyPollFactor), readyPollMax)
			}
			next = e.Jittered(next)
			if err != nil {
				next = max(next, poll.RetryAfter(err))
			}
			if !e.Now().Before(deadline) {
				return w.inst, &StepError{Step: stepReady, Instance: w.id, Outcome: OutcomeReadyFailed,
					Err: fmt.Errorf("not running within the ready deadline (last: %s)", text.OrDash(w.last))}
			}
			nextShow = e.Now().Add(next)
			w.probe.consider(ctx, w.inst)
		}
		wake := nextShow
		if w.probe.armed() {
			wake = minTime(wake, e.Now().Add(probeEvery))
		}
		if err := e.Sleep(ctx, max(minTime(wake, deadline).Sub(e.Now()), time.Millisecond)); err != nil {
			return w.inst, err
		}
	}
}

// observe asks the API once. done with a nil error: running, SSH
// published; done with an error: it will never be ready. Not done: keep
// waiting (err says why this look failed, for the cadence).
func (w *readyWait) observe(ctx context.Context) (bool, error) {
	e := w.e
	inst, err := e.Market.ShowInstance(ctx, w.id)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		if e.Now().Sub(w.start) > 2*time.Minute { // longer than any read lag
			return true, w.fail("instance vanished")
		}
		return false, nil
	case err != nil:
		if !errors.Is(err, provider.ErrRateLimited) {
			e.Log.Debug("readiness poll failed", "instance", w.id, "err", err)
		}
		return false, err
	}
	w.inst = inst
	status := inst.ActualStatus
	if status == "" {
		status = "scheduling"
	}
	if desc := status + ": " + inst.StatusMsg; desc != w.last {
		e.Infof("instance %d %s", w.id, strings.TrimSuffix(desc, ": "))
		w.last = desc
	}
	if inst.Running() {
		return true, nil
	}
	if inst.ActualStatus == "created" {
		if w.createdSince.IsZero() {
			w.createdSince = e.Now()
		}
	} else {
		w.createdSince = time.Time{}
	}
	var createdFor time.Duration
	if !w.createdSince.IsZero() {
		createdFor = e.Now().Sub(w.createdSince)
	}
	if reason := w.stalled(inst); reason != "" {
		return true, w.fail(reason)
	}
	if reason := terminalReason(inst, createdFor); reason != "" {
		if w.probe.dialled && stopLike(inst) {
			// Its SSH was being dialled and never answered: the same
			// interruption connect names when the API saw it running first.
			return true, &StepError{Step: stepReady, Instance: w.id, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("%w: %s", ErrStoppedBeforeSSH, reason)}
		}
		return true, w.fail(reason)
	}
	return false, nil
}

// stalled says why a loading instance's pull is judged stalled, or "":
// Vast's status message carries docker's pull progress while loading, so
// one that has not changed for the run's pull stall bound
// (timeouts.pull_stall) means a pull that stopped. A pull whose messages
// keep changing is never stopped here, however long it takes.
func (w *readyWait) stalled(inst provider.Instance) string {
	now := w.e.Now()
	if inst.ActualStatus != "loading" {
		w.pullMsg, w.pullSince = "", time.Time{}
		return ""
	}
	if w.pullSince.IsZero() || inst.StatusMsg != w.pullMsg {
		w.pullMsg, w.pullSince = inst.StatusMsg, now
		return ""
	}
	if bound := w.e.pullStall(); now.Sub(w.pullSince) >= bound {
		return fmt.Sprintf("image pull stalled: no progress for %s (status: %s)", now.Sub(w.pullSince).Round(time.Second), text.OrDash(inst.StatusMsg))
	}
	return ""
}

func (w *readyWait) fail(reason string) error {
	return &StepError{Step: stepReady, Instance: w.id, Outcome: OutcomeReadyFailed, Err: errors.New(reason)}
}

// stopLike says whether the instance was stopped, exited or lost its host
// (not an image error, not stuck before its container started).
func stopLike(in provider.Instance) bool {
	switch in.ActualStatus {
	case "exited", "offline", "stopped":
		return true
	}
	return in.Paused() || in.IntendedStatus == "stopped"
}

// sshProbe dials a not-yet-running instance's SSH with the run's key. It
// arms when the API shows the instance before "running" (scheduling,
// created, loading), not failed, with an SSH address published; arming
// attaches the run's key once (connect attaches it again, harmlessly). A
// key that cannot be attached leaves the probe off: connect attaches with
// its own retries after the API says running. It holds the first
// connection that authenticates.
type sshProbe struct {
	e      *Scope
	id     provider.InstanceID
	dialer *remote.Dialer // set once the key is attached
	off    bool
	// dialled: SSH was dialled at least once (and had not answered).
	dialled bool
	eps     []remote.Endpoint
	client  *remote.Client
}

// armed says whether try should dial.
func (p *sshProbe) armed() bool {
	return !p.off && p.dialer != nil && p.client == nil && len(p.eps) > 0
}

// consider arms (or disarms) the probe from what the API just showed.
func (p *sshProbe) consider(ctx context.Context, inst provider.Instance) {
	p.eps = nil
	if p.off || p.client != nil || inst.ActualStatus == "running" || inst.Paused() || inst.IntendedStatus == "stopped" || terminalReason(inst, 0) != "" {
		return
	}
	p.eps = endpoints(inst)
	if len(p.eps) == 0 || p.dialer != nil {
		return
	}
	kp, err := remote.EnsureKeyPair(p.e.runDir, "vastrun-"+p.e.state.RunID)
	if err == nil {
		// One try: the probe only saves time, and connect attaches with
		// retries if this one failed.
		err = p.e.Market.AttachSSHKey(ctx, p.id, kp.AuthorizedKey)
	}
	if err != nil {
		p.off = true
		p.e.Log.Debug("SSH readiness probe off", "instance", p.id, "err", err)
		return
	}
	d := sshDialer(p.e, kp)
	p.dialer = &d
}

// try dials once; true when SSH answered (the connection is kept).
func (p *sshProbe) try(ctx context.Context) bool {
	p.dialled = true
	c, err := p.dialer.DialWithin(ctx, p.eps, probeDialTimeout)
	if err != nil {
		if errors.Is(err, remote.ErrHostKeyChanged) {
			p.off = true // connect reports it as the verify failure it is
		}
		return false
	}
	p.e.Log.Debug("SSH answered before the API said running", "instance", p.id)
	p.client = c
	return true
}

func (p *sshProbe) close() {
	if p.client != nil {
		p.client.Close() //nolint:errcheck // the probe's connection was never used: the wait's own error is what is reported
		p.client = nil
	}
}

// sshDialer is how a run dials its instances: its key, its pinned host
// keys, redials paced on the run's clock.
func sshDialer(e *Scope, kp remote.KeyPair) remote.Dialer {
	return remote.Dialer{Key: kp.Signer, KnownHostsPath: e.runDir + "/known_hosts", Clock: e.Clock, KeepAlive: e.SSHKeepAlive}
}

// attachRunKey makes sure the run's key pair exists and is attached to id.
func attachRunKey(ctx context.Context, e *Scope, id provider.InstanceID) (remote.KeyPair, error) {
	kp, err := remote.EnsureKeyPair(e.runDir, "vastrun-"+e.state.RunID)
	if err != nil {
		return kp, err
	}
	// Attaching twice is harmless: the decorator retries it.
	attach := &retry.Market{Inner: e.Market, Clock: e.Clock, MaxTries: 5, Initial: 2 * time.Second}
	if err := attach.AttachSSHKey(ctx, id, kp.AuthorizedKey); err != nil {
		return kp, &StepError{Step: "attach SSH key", Instance: id, Err: err}
	}
	return kp, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
