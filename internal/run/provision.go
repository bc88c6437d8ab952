package run

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// reconcileGrace is how long an ambiguous create is given to show up in
// listings (read-after-create lag) before it is judged not to have rented.
const reconcileGrace = 90 * time.Second

// maxAttempts bounds rentals per run: the first, and one replacement on a
// different machine when the first never becomes ready.
const maxAttempts = 2

// rent creates one instance from o, journaling intent first. An ambiguous
// outcome is reconciled by label, never retried blindly.
func (e *Engine) rent(ctx context.Context, o provider.Offer) (provider.InstanceID, error) {
	p := e.Config.Policy()
	total := policy.TotalDPH(o, p.DiskGB)
	a := Attempt{MachineID: o.MachineID, GPUName: o.GPUName, NumGPUs: o.NumGPUs, DPHTotal: total, DPHBase: o.DPHBase, StorageDPH: total - o.DPHBase}
	if err := e.record("intent", stepRent, rentIntent{Label: e.state.Label, Offer: o.ID, Attempt: a}); err != nil {
		return 0, err
	}
	// The label is known before the rental exists: put it in the CI's
	// durable state now, so a job killed between create and its answer can
	// still be cleaned up by label (post step, after_script, down --label).
	if err := e.CI.Persist(map[string]string{"label": e.state.Label, "run_id": e.state.RunID}); err != nil {
		e.infof("warning: could not write CI state: %v", err)
	}
	e.infof("renting offer %d (%s x%d, $%.4f/h) as %s", o.ID, o.GPUName, o.NumGPUs, total, e.state.Label)
	res, err := e.Market.CreateInstance(ctx, provider.CreateRequest{
		OfferID: o.ID, Image: e.Config.Image, DiskGB: p.DiskGB, Label: e.state.Label,
		Runtype: "ssh_direc ssh_proxy", CancelUnavail: true,
	})
	switch {
	case err == nil:
		if err := e.rented(res.InstanceID, "created"); err != nil {
			return res.InstanceID, err
		}
		return res.InstanceID, nil
	case errors.Is(err, provider.ErrOutcomeUnknown):
		var oe *provider.OutcomeUnknownError
		errors.As(err, &oe)
		e.infof("create answered ambiguously (%v); reconciling by label %s", err, e.state.Label)
		e.record("event", stepRent, map[string]any{"ambiguous": err.Error()})
		return e.reconcile(ctx, oe.InstanceID)
	default:
		e.record("failed", stepRent, instanceData{Reason: err.Error()})
		return 0, err
	}
}

// rented records the new id in the journal and in the CI's durable state.
func (e *Engine) rented(id provider.InstanceID, how string) error {
	step := stepRent
	if how == "adopted" {
		step = stepAdopt
	}
	if err := e.record("done", step, instanceData{Instance: id, Reason: how}); err != nil {
		return err
	}
	if err := e.CI.Persist(map[string]string{"instance_id": id.String()}); err != nil {
		e.infof("warning: could not write CI state: %v", err)
	}
	return nil
}

// errNotRented means reconciliation concluded nothing was rented.
var errNotRented = errors.New("the ambiguous create did not rent anything")

// reconcile finds what an ambiguous create did by listing the run's label
// until the listing is complete and shows the rental, or the grace ends.
// hint is a contract id the error body mentioned, if any.
func (e *Engine) reconcile(ctx context.Context, hint provider.InstanceID) (provider.InstanceID, error) {
	deadline := e.now().Add(reconcileGrace)
	wait := 2 * time.Second
	for {
		list, err := e.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{e.state.Label}})
		if err == nil {
			ids := make([]provider.InstanceID, 0, len(list))
			for _, in := range list {
				ids = append(ids, in.ID)
			}
			if hint != 0 && !containsID(ids, hint) {
				if _, serr := e.Market.ShowInstance(ctx, hint); serr == nil {
					ids = append(ids, hint)
				}
			}
			if len(ids) > 0 {
				keep := chooseKeeper(ids, hint)
				if err := e.rented(keep, "adopted"); err != nil {
					return keep, err
				}
				e.infof("adopted instance %d found by label", keep)
				for _, id := range ids {
					if id != keep {
						e.infof("instance %d is a duplicate for label %s: destroying it", id, e.state.Label)
						e.record("event", stepAdopt, instanceData{Instance: id, Reason: "duplicate"})
					}
				}
				return keep, nil
			}
		} else {
			e.Log.Debug("label listing failed during reconcile", "err", err)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !e.now().Before(deadline) {
			if err != nil {
				return 0, &StepError{Step: stepRent, Err: fmt.Errorf("outcome unknown and label %s could not be listed: %w (teardown will sweep the label)", e.state.Label, err)}
			}
			e.record("failed", stepRent, instanceData{Reason: "ambiguous create: nothing carries the label after the grace period"})
			return 0, errNotRented
		}
		if err := e.sleep(ctx, e.jittered(wait)); err != nil {
			return 0, err
		}
		wait = min(wait*2, 15*time.Second)
	}
}

func containsID(ids []provider.InstanceID, id provider.InstanceID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// chooseKeeper picks the contract to keep: the one the server named, else
// the oldest. Every process sees the same listing, so all agree.
func chooseKeeper(ids []provider.InstanceID, hint provider.InstanceID) provider.InstanceID {
	if hint != 0 && containsID(ids, hint) {
		return hint
	}
	sorted := append([]provider.InstanceID(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return sorted[0]
}

// dedupe enforces one live contract per label after a rental: any other
// instance carrying the label is recorded as an extra and destroyed.
func (e *Engine) dedupe(ctx context.Context, keep provider.InstanceID) {
	list, err := e.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{e.state.Label}})
	if err != nil {
		return // teardown lists again, completely, before it confirms
	}
	for _, in := range list {
		if in.ID != keep && e.state.attemptFor(in.ID) == nil {
			e.record("event", stepAdopt, instanceData{Instance: in.ID, Reason: "duplicate"})
			e.infof("instance %d also carries label %s: destroying the duplicate", in.ID, e.state.Label)
			e.destroyConfirm(ctx, in.ID, time.Time{})
		}
	}
}

var imageErrorRE = regexp.MustCompile(`(?i)error response from daemon|manifest (for|unknown)|not found: manifest|pull access denied|unauthorized|oci runtime|no such image|error pulling|failed to pull|permission denied`)

// stuckCreated is how long "created" may last before it counts as stuck.
const stuckCreated = 3 * time.Minute

// terminalReason says why an instance will never become ready, or "".
func terminalReason(in provider.Instance, createdFor time.Duration) string {
	switch {
	case in.Paused():
		return "paused (cur/intended/next state stopped): outbid or stopped"
	case in.ActualStatus == "exited" || in.ActualStatus == "offline" || in.ActualStatus == "unknown":
		return fmt.Sprintf("actual_status %s: %s", in.ActualStatus, in.StatusMsg)
	case in.StatusMsg != "" && imageErrorRE.MatchString(in.StatusMsg):
		return "image or container error: " + in.StatusMsg
	case in.ActualStatus == "created" && createdFor >= stuckCreated:
		return fmt.Sprintf("stuck in created for %s", createdFor.Round(time.Second))
	}
	return ""
}

// waitReady polls with adaptive, jittered intervals until the instance runs
// with SSH published, fails terminally, or the deadline passes.
func (e *Engine) waitReady(ctx context.Context, id provider.InstanceID, deadline time.Time) (provider.Instance, error) {
	interval := 2 * time.Second
	start := e.now()
	var createdSince time.Time
	last := ""
	var inst provider.Instance
	for {
		var err error
		inst, err = e.Market.ShowInstance(ctx, id)
		switch {
		case err == nil:
			status := inst.ActualStatus
			if status == "" {
				status = "scheduling"
			}
			if desc := status + ": " + inst.StatusMsg; desc != last {
				e.infof("instance %d %s", id, strings.TrimSuffix(desc, ": "))
				last = desc
			}
			if inst.Running() {
				return inst, e.record("done", stepReady, instanceData{Instance: id})
			}
			if inst.ActualStatus == "created" {
				if createdSince.IsZero() {
					createdSince = e.now()
				}
			} else {
				createdSince = time.Time{}
			}
			var createdFor time.Duration
			if !createdSince.IsZero() {
				createdFor = e.now().Sub(createdSince)
			}
			if reason := terminalReason(inst, createdFor); reason != "" {
				return inst, &StepError{Step: stepReady, Instance: id, Outcome: OutcomeReadyFailed, Err: errors.New(reason)}
			}
		case errors.Is(err, provider.ErrNotFound):
			if e.now().Sub(start) > 2*time.Minute { // longer than any read lag
				return inst, &StepError{Step: stepReady, Instance: id, Outcome: OutcomeReadyFailed, Err: errors.New("instance vanished")}
			}
		case errors.Is(err, provider.ErrRateLimited):
			interval = min(interval*2, time.Minute)
		case errors.Is(err, provider.ErrAuth), ctx.Err() != nil:
			return inst, err
		default:
			e.Log.Debug("readiness poll failed", "instance", id, "err", err)
		}
		if !e.now().Before(deadline) {
			return inst, &StepError{Step: stepReady, Instance: id, Outcome: OutcomeReadyFailed,
				Err: fmt.Errorf("not running within the ready deadline (last: %s)", orDash(last))}
		}
		wait := min(e.jittered(interval), deadline.Sub(e.now()))
		if err := e.sleep(ctx, max(wait, time.Millisecond)); err != nil {
			return inst, err
		}
		// "loading" comes right before "running": poll it closely, since
		// every second between running and noticing is billed.
		limit := 15 * time.Second
		if inst.ActualStatus == "loading" {
			limit = 5 * time.Second
		}
		interval = min(interval*3/2, limit)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// provision selects, approves, rents, waits and connects, replacing a
// rental that never becomes ready once on a different machine.
func (e *Engine) provision(ctx context.Context, exclude []int64) (*remote.Client, provider.Instance, error) {
	for attempt := 1; ; attempt++ {
		t0 := e.now()
		offer, err := e.selectOffer(ctx, exclude)
		e.timings.add("select", e.now().Sub(t0))
		if err != nil {
			return nil, provider.Instance{}, err
		}
		if err := e.approve(*offer, attempt); err != nil {
			return nil, provider.Instance{}, err
		}
		t0 = e.now()
		id, err := e.rent(ctx, *offer)
		if isOfferGone(err) {
			var next provider.Offer
			id, next, err = e.rentRace(ctx, *offer, err, &exclude, attempt)
			offer = &next
		}
		e.timings.add("rent", e.now().Sub(t0))
		if err != nil {
			return nil, provider.Instance{}, err
		}
		e.dedupe(ctx, id)
		t0 = e.now()
		deadline := e.now().Add(time.Duration(e.Config.Timeouts.Ready))
		inst, err := e.waitReady(ctx, id, deadline)
		var client *remote.Client
		if err == nil {
			client, err = e.connect(ctx, id, inst, deadline)
		}
		e.timings.add("ready", e.now().Sub(t0))
		if err == nil {
			return client, inst, nil
		}
		var se *StepError
		if !errors.As(err, &se) || se.Outcome != OutcomeReadyFailed || ctx.Err() != nil {
			return nil, inst, err
		}
		// Terminal or too slow: destroy it (confirmed) and try once elsewhere.
		e.record("event", stepFailover, instanceData{Instance: id, Reason: se.Err.Error()})
		e.infof("instance %d failed: %v; destroying it", id, se.Err)
		if cerr := e.destroyConfirm(context.WithoutCancel(ctx), id, time.Time{}); cerr != nil {
			return nil, inst, fmt.Errorf("%w; and its destruction is not confirmed: %v", err, cerr)
		}
		exclude = append(exclude, offer.MachineID)
		if attempt >= maxAttempts {
			return nil, inst, err
		}
		e.infof("retrying once on a different machine")
	}
}

// connect attaches the run's key and dials SSH until it answers.
func (e *Engine) connect(ctx context.Context, id provider.InstanceID, inst provider.Instance, deadline time.Time) (*remote.Client, error) {
	kp, err := remote.EnsureKeyPair(e.runDir, "vastrun-"+e.state.RunID)
	if err != nil {
		return nil, err
	}
	var attachErr error
	for try := 0; try < 5; try++ {
		if attachErr = e.Market.AttachSSHKey(ctx, id, kp.AuthorizedKey); attachErr == nil {
			break
		}
		if errors.Is(attachErr, provider.ErrAuth) || e.sleep(ctx, time.Duration(try+1)*2*time.Second) != nil {
			break
		}
	}
	if attachErr != nil {
		return nil, &StepError{Step: "attach SSH key", Instance: id, Err: attachErr}
	}
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: e.runDir + "/known_hosts"}
	eps := endpoints(inst)
	wait := time.Second
	for {
		c, err := d.Dial(ctx, eps)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, remote.ErrHostKeyChanged) {
			return nil, &StepError{Step: "ssh", Instance: id, Outcome: OutcomeVerifyFailed, Err: err}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !e.now().Before(deadline) {
			return nil, &StepError{Step: "ssh", Instance: id, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("SSH never answered before the ready deadline: %w", err)}
		}
		e.Log.Debug("ssh not answering yet", "instance", id, "err", err)
		if err := e.sleep(ctx, e.jittered(wait)); err != nil {
			return nil, err
		}
		wait = min(wait*2, 10*time.Second)
		// Refresh endpoints: ports can be published late.
		if fresh, err := e.Market.ShowInstance(ctx, id); err == nil && len(endpoints(fresh)) > 0 {
			eps = endpoints(fresh)
		}
	}
}

func endpoints(in provider.Instance) []remote.Endpoint {
	var out []remote.Endpoint
	for _, ep := range in.SSHEndpoints() {
		out = append(out, remote.Endpoint{Host: ep.Host, Port: ep.Port})
	}
	return out
}
