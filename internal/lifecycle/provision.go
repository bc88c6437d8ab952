package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/text"
)

// reconcileGrace is how long an ambiguous create is given to show up in
// listings (read-after-create lag) before it is judged not to have rented.
const reconcileGrace = 90 * time.Second

// maxAttempts bounds rentals per run: the first, and one replacement on a
// different machine when the first never becomes ready.
const maxAttempts = 2

// rent creates one instance from o, journaling intent first. An ambiguous
// outcome is reconciled by label, never retried blindly.
func rent(ctx context.Context, e *Scope, o provider.Offer) (provider.InstanceID, error) {
	// One live contract per label, whatever the timing: a rental starts only
	// when the journal knows of no instance that may still be live and of no
	// create whose outcome is unknown (retireEarlier and reconcile see to it).
	if ids := e.state.Unconfirmed(); len(ids) > 0 {
		return 0, &StepError{Step: stepRent, Err: fmt.Errorf("%w: instances %v", ErrEarlierRentalLive, ids)}
	}
	if e.state.AmbiguousRent() {
		return 0, &StepError{Step: stepRent, Err: fmt.Errorf("%w: an earlier create's outcome is unknown", ErrEarlierRentalLive)}
	}
	login, err := imageLogin(e) // checked in prepare; read again here, before the intent
	if err != nil {
		return 0, err
	}
	m := e.Frozen()
	p := m.Policy
	total := p.Price(o) // the bid + storage for an interruptible rental (bid.go)
	a := receipt.Attempt{MachineID: o.MachineID, GPUName: o.GPUName, NumGPUs: o.NumGPUs, DPHTotal: total, DPHBase: o.DPHBase, StorageDPH: policy.StorageDPH(o, p.DiskGB), Bid: newAttemptBid(p, o)}
	if err := e.Record("intent", stepRent, runstate.RentIntent{Label: e.state.Label, Offer: o.ID, Attempt: a}); err != nil {
		return 0, err
	}
	// The label is known before the rental exists: put it in the CI's
	// durable state now, so a job killed between create and its answer can
	// still be cleaned up by label (post step, after_script, down --label).
	if err := e.CI.Persist(ciKeys(e.state.RunID, map[string]string{"label": e.state.Label, "run_id": e.state.RunID})); err != nil {
		e.Infof("warning: could not write CI state: %v", err)
	}
	e.Infof("renting offer %d (%s x%d, $%.4f/h) as %s", o.ID, o.GPUName, o.NumGPUs, total, e.state.Label)
	e.readyFor = e.readyDeadlineFor(o)
	res, err := e.Market.CreateInstance(ctx, provider.CreateRequest{
		OfferID: o.ID, Image: m.Image, DiskGB: p.DiskGB, Label: e.state.Label,
		Runtype: "ssh_direc ssh_proxy", CancelUnavail: true, ImageLogin: login, BidPrice: p.Bid(o), NumGPUs: o.NumGPUs,
	})
	switch {
	case err == nil:
		if err := rented(e, res.InstanceID, "created"); err != nil {
			return res.InstanceID, err
		}
		return res.InstanceID, nil
	case errors.Is(err, provider.ErrOutcomeUnknown):
		var oe *provider.OutcomeUnknownError
		errors.As(err, &oe)
		e.Infof("create answered ambiguously (%v); reconciling by label %s", err, e.state.Label)
		if jerr := e.Record("event", stepRent, map[string]any{"ambiguous": err.Error()}); jerr != nil {
			return 0, jerr // teardown sweeps the label: the rent intent is journaled
		}
		return reconcile(ctx, e, oe.InstanceID)
	default:
		if jerr := e.Record("failed", stepRent, runstate.InstanceData{Reason: err.Error()}); jerr != nil {
			return 0, errors.Join(err, jerr)
		}
		return 0, err
	}
}

// ciKeys adds to kv a copy of each key suffixed with the run id
// (label_<run>, instance_id_<run>), so that several runs in one CI job keep
// separate cleanup handles; the plain keys name the latest run only, a
// convenience like the state directory's "current" pointer.
func ciKeys(runID string, kv map[string]string) map[string]string {
	out := make(map[string]string, 2*len(kv))
	for k, v := range kv {
		out[k] = v
		if k != "run_id" {
			out[k+"_"+runID] = v
		}
	}
	return out
}

// ErrEarlierRentalLive means a rent was refused because an earlier rental of
// the run may still be live.
var ErrEarlierRentalLive = errors.New("an earlier rental of this run is not confirmed destroyed, so nothing new is rented")

// retireEarlier destroys, confirmed, every instance of the run whose
// destruction the journal does not record as confirmed, before anything new
// is rented. A controller killed between journaling "failover" and
// "confirm" leaves such an instance live (paused instances still count):
// renting beside it would make two live contracts for one label.
func retireEarlier(ctx context.Context, e *Scope) error {
	for _, id := range e.state.Unconfirmed() {
		e.Infof("instance %d of this run is not confirmed destroyed: destroying it before renting another", id)
		if err := destroyConfirm(context.WithoutCancel(ctx), e, id, time.Time{}); err != nil {
			return &StepError{Step: stepRent, Instance: id, Err: fmt.Errorf("%w: %w", ErrEarlierRentalLive, err)}
		}
	}
	return nil
}

// rented records the new id in the journal and in the CI's durable state.
func rented(e *Scope, id provider.InstanceID, how string) error {
	step := stepRent
	if how == "adopted" {
		step = stepAdopt
	}
	if err := e.Record("done", step, runstate.InstanceData{Instance: id, Reason: how}); err != nil {
		return err
	}
	if err := e.CI.Persist(ciKeys(e.state.RunID, map[string]string{"instance_id": id.String()})); err != nil {
		e.Infof("warning: could not write CI state: %v", err)
	}
	return nil
}

// errNotRented means reconciliation concluded nothing was rented.
var errNotRented = errors.New("the ambiguous create did not rent anything")

// reconcile finds what an ambiguous create did by listing the run's label
// until the listing is complete and shows the rental, or the grace ends.
// hint is a contract id the error body mentioned, if any.
func reconcile(ctx context.Context, e *Scope, hint provider.InstanceID) (provider.InstanceID, error) {
	var keep provider.InstanceID
	var adoptErr error
	err := poll.Until(ctx, e.Clock, poll.Policy{Initial: 2 * time.Second, Max: 15 * time.Second, Jitter: e.jitter(), Deadline: e.Now().Add(reconcileGrace)},
		func(ctx context.Context) (bool, error) {
			list, err := e.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{e.state.Label}, Brief: true})
			if err != nil {
				e.Log.Debug("label listing failed during reconcile", "err", err)
				return false, err
			}
			ids := make([]provider.InstanceID, 0, len(list))
			for _, in := range list {
				// An instance the journal already knows (an earlier attempt,
				// an extra) is never what this create rented.
				if e.state.AttemptFor(in.ID) == nil && !containsID(e.state.Extras, in.ID) {
					ids = append(ids, in.ID)
				}
			}
			if hint != 0 && !containsID(ids, hint) {
				if _, serr := e.Market.ShowInstance(ctx, hint); serr == nil {
					ids = append(ids, hint)
				}
			}
			if len(ids) == 0 {
				return false, nil
			}
			keep = chooseKeeper(ids, hint)
			if adoptErr = rented(e, keep, "adopted"); adoptErr != nil {
				return true, nil
			}
			e.Infof("adopted instance %d found by label", keep)
			for _, id := range ids {
				if id != keep {
					e.Infof("instance %d is a duplicate for label %s: destroying it", id, e.state.Label)
					if adoptErr = e.Record("event", stepAdopt, runstate.InstanceData{Instance: id, Reason: "duplicate"}); adoptErr != nil {
						return true, nil
					}
				}
			}
			return true, nil
		})
	var de *poll.DeadlineError
	switch {
	case err == nil:
		return keep, adoptErr
	case ctx.Err() != nil:
		return 0, ctx.Err()
	case errors.As(err, &de) && de.Last == nil:
		// Judged not rented, yet Vast can still process the create late:
		// the label stays possibly live, and the teardown watches it
		// (sweepLate).
		if rerr := e.Record("failed", stepRent, runstate.InstanceData{Reason: "ambiguous create: nothing carries the label after the grace period", Ambiguous: true}); rerr != nil {
			return 0, rerr
		}
		return 0, errNotRented
	}
	return 0, &StepError{Step: stepRent, Err: fmt.Errorf("outcome unknown and label %s could not be listed: %w (teardown will sweep the label)", e.state.Label, err)}
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
func dedupe(ctx context.Context, e *Scope, keep provider.InstanceID) error {
	// The rental is billing while this looks: a rate-limited listing does
	// not hold it up for long.
	lctx, cancel := boundOnClock(ctx, e.Clock, e.Now().Add(dedupeListWait))
	list, err := e.Market.ListInstances(lctx, provider.ListOptions{Labels: []string{e.state.Label}, Brief: true})
	cancel()
	if err != nil {
		return nil // teardown lists again, completely, before it confirms
	}
	var jerr error
	for _, in := range list {
		if in.ID != keep && e.state.AttemptFor(in.ID) == nil {
			// Destroying is the safe side: it goes ahead even when the
			// journal cannot say so, and the step fails after it.
			jerr = errors.Join(jerr, e.Record("event", stepAdopt, runstate.InstanceData{Instance: in.ID, Reason: "duplicate"}))
			e.Infof("instance %d also carries label %s: destroying the duplicate", in.ID, e.state.Label)
			if err := destroyConfirm(ctx, e, in.ID, time.Time{}); err != nil {
				// Journaled as an extra above: the teardown destroys it again.
				e.Infof("the duplicate is not confirmed destroyed yet (%v); the teardown destroys it again", err)
			}
		}
	}
	return jerr
}

// dedupeListWait bounds the listing (and its retries) dedupe makes.
const dedupeListWait = 15 * time.Second

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

// provision selects, approves, rents, waits and connects, replacing a
// rental that never becomes ready once on a different machine.
func provision(ctx context.Context, e *Scope, exclude []int64) (*remote.Client, provider.Instance, error) {
	for attempt := 1; ; attempt++ {
		if err := retireEarlier(ctx, e); err != nil {
			return nil, provider.Instance{}, err
		}
		t0 := e.Now()
		// Select and approve run for every rental: offers move, and each
		// rental's plan is approved on its own.
		offer, err := selectOffer(ctx, e, exclude)
		e.timings.add("select", e.Now().Sub(t0))
		if err = e.journalCondition(stepSelect, 0, err); err != nil {
			return nil, provider.Instance{}, err
		}
		if err := e.journalCondition(stepApprove, 0, approve(e, *offer, attempt)); err != nil {
			return nil, provider.Instance{}, err
		}
		t0 = e.Now()
		id, err := rent(ctx, e, *offer)
		if isOfferGone(err) {
			var next provider.Offer
			id, next, err = rentRace(ctx, e, *offer, err, &exclude, attempt)
			offer = &next
		}
		e.timings.add("rent", e.Now().Sub(t0))
		if err = e.journalCondition(stepRent, id, err); err != nil {
			return nil, provider.Instance{}, err
		}
		if err := dedupe(ctx, e, id); err != nil {
			return nil, provider.Instance{}, err
		}
		if err := assertBid(ctx, e, id); err != nil { // a bid is read back before anything else
			return nil, provider.Instance{}, err
		}
		t0 = e.Now()
		// The pull of the image on this host counts (readyDeadlineFor).
		deadline := e.Now().Add(e.readyDeadlineFor(*offer))
		// Ready and connect are observed afresh for every new rental (a
		// connection is this process's, not the journal's), so their
		// conditions are journaled but never skip the step.
		// The ready wait may already hold a connection (its SSH probe).
		inst, client, err := waitReady(ctx, e, id, deadline)
		if err = e.journalCondition(stepReady, id, err); err != nil && client != nil {
			_ = client.Close() // always nil (it drops the connection, which is not used); the step's error is the one reported
			client = nil
		}
		if err == nil {
			if client == nil {
				client, err = connect(ctx, e, id, inst, deadline)
			}
			if err = e.journalCondition(stepConnect, id, err); err != nil && client != nil {
				_ = client.Close() // always nil (it drops the connection, which is not used); the step's error is the one reported
				client = nil
			}
		}
		e.timings.add("ready", e.Now().Sub(t0))
		if err == nil {
			return client, inst, nil
		}
		var se *StepError
		if !errors.As(err, &se) || se.Outcome != OutcomeReadyFailed || ctx.Err() != nil {
			return nil, inst, err
		}
		// Terminal or too slow: destroy it (confirmed) and try once elsewhere.
		if jerr := e.Record("event", stepFailover, runstate.InstanceData{Instance: id, Reason: se.Err.Error()}); jerr != nil {
			return nil, inst, errors.Join(err, jerr) // teardown destroys it
		}
		e.Infof("instance %d failed: %v; destroying it", id, se.Err)
		if cerr := destroyConfirm(context.WithoutCancel(ctx), e, id, time.Time{}); cerr != nil {
			return nil, inst, fmt.Errorf("%w; and its destruction is not confirmed: %v", err, cerr) //nolint:errorlint // the class is the instance's failure; the destroy's error is context only (the teardown tries it again)
		}
		exclude = append(exclude, offer.MachineID)
		if attempt >= provisionAttempts(e) {
			return nil, inst, err
		}
		e.Infof("retrying once on a different machine")
	}
}

// connectStatusEvery is how often, at most, the dial loop asks the API
// whether the instance still runs (on the run's clock).
const connectStatusEvery = 5 * time.Second

// ErrStoppedBeforeSSH means the instance stopped, exited, went offline or
// vanished after it was seen running and before SSH answered: an
// interruption, replaced like a rental that never became ready.
var ErrStoppedBeforeSSH = errors.New("stopped before SSH answered")

// stoppedReason says why an instance that was running can no longer answer
// SSH, or "" while it may still.
func stoppedReason(in provider.Instance) string {
	if r := terminalReason(in, 0); r != "" {
		return r
	}
	if in.ActualStatus == "stopped" || in.IntendedStatus == "stopped" {
		return fmt.Sprintf("actual_status %s, intended_status %s", text.OrDash(in.ActualStatus), text.OrDash(in.IntendedStatus))
	}
	return ""
}

// connect attaches the run's key and dials SSH until it answers. Between
// dials it asks the API whether the instance still runs (at most every
// connectStatusEvery): one stopped, exited, offline or gone ends the
// attempt at once (ErrStoppedBeforeSSH) instead of being redialled until
// the deadline.
func connect(ctx context.Context, e *Scope, id provider.InstanceID, inst provider.Instance, deadline time.Time) (*remote.Client, error) {
	kp, err := attachRunKey(ctx, e, id)
	if err != nil {
		return nil, err
	}
	// The client redials a dropped or stalled connection itself (same
	// pinned host key), pacing its redials on the run's clock.
	d := sshDialer(e, kp)
	eps := endpoints(inst)
	var c *remote.Client
	var stopped *StepError
	var lastStatus time.Time // the caller has just seen it running: the first redial looks
	tries := 0
	err = poll.Until(ctx, e.Clock, poll.Policy{Initial: time.Second, Max: 10 * time.Second, Jitter: e.jitter(), Deadline: deadline,
		Permanent: func(err error) bool {
			return errors.Is(err, remote.ErrHostKeyChanged) || errors.As(err, new(*StepError))
		}},
		func(ctx context.Context) (bool, error) {
			if tries++; tries > 1 && (lastStatus.IsZero() || e.Now().Sub(lastStatus) >= connectStatusEvery) {
				lastStatus = e.Now()
				fresh, err := e.Market.ShowInstance(ctx, id)
				reason := ""
				switch {
				case errors.Is(err, provider.ErrNotFound):
					reason = "the API no longer has it"
				case err == nil:
					reason = stoppedReason(fresh)
					// Ports can be published late: dial what is published now.
					if eps2 := endpoints(fresh); reason == "" && len(eps2) > 0 {
						eps = eps2
					}
				default:
					e.Log.Debug("instance status unknown between dials", "instance", id, "err", err)
				}
				if reason != "" {
					stopped = &StepError{Step: "ssh", Instance: id, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("%w: %s", ErrStoppedBeforeSSH, reason)}
					return false, stopped
				}
			}
			var err error
			if c, err = d.Dial(ctx, eps); err != nil {
				e.Log.Debug("ssh not answering yet", "instance", id, "err", err)
				return false, err
			}
			return true, nil
		})
	switch {
	case err == nil:
		return c, nil
	case stopped != nil:
		return nil, stopped // provision (or attach) says so as it replaces it
	case errors.Is(err, remote.ErrHostKeyChanged):
		return nil, &StepError{Step: "ssh", Instance: id, Outcome: OutcomeVerifyFailed, Err: err}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, &StepError{Step: "ssh", Instance: id, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("SSH never answered before the ready deadline: %w", err)}
}

func endpoints(in provider.Instance) []remote.Endpoint {
	var out []remote.Endpoint
	for _, ep := range in.SSHEndpoints() {
		out = append(out, remote.Endpoint{Host: ep.Host, Port: ep.Port})
	}
	return out
}

// attach connects to the run's live instance, or rents a new one. It never
// rents while the journal's current instance may still be alive.
func attach(ctx context.Context, e *Scope, exclude []int64) (*remote.Client, provider.Instance, error) {
	// A controller that died mid-create left a rent intent without an id:
	// what it rented (if anything) is found by label, never rented again.
	if a := e.state.Current(); a != nil && a.InstanceID == 0 && a.Failure == "" {
		e.Infof("the last create's outcome is unknown; reconciling by label %s", e.state.Label)
		if _, err := reconcile(ctx, e, 0); err != nil && !errors.Is(err, errNotRented) {
			return nil, provider.Instance{}, err
		}
	}
	if a := e.state.Current(); a != nil && a.InstanceID != 0 && !a.Confirmed && a.Failure == "" {
		inst, err := e.Market.ShowInstance(ctx, a.InstanceID)
		switch {
		case err == nil && inst.Running():
			e.Infof("re-attaching to instance %d", inst.ID)
			client, cerr := connect(ctx, e, inst.ID, inst, e.Now().Add(e.readyDeadline()))
			if cerr == nil {
				// A controller that died before its verify finished verifies
				// now (a no-op when verify is True for this instance).
				if err := verify(ctx, e, client, inst); err != nil {
					_ = client.Close() // always nil (it drops the connection, which is not used); the verify's error is the one reported
					return nil, inst, err
				}
				return client, inst, nil
			}
			if ctx.Err() != nil {
				return nil, inst, cerr
			}
			// Unreachable (or stopped while we dialled): the same as a
			// rental that never answered, so it is replaced, not the run
			// failed.
			if err := e.Record("event", stepFailover, runstate.InstanceData{Instance: a.InstanceID, Reason: "unreachable when the controller resumed: " + cerr.Error()}); err != nil {
				return nil, inst, err
			}
			e.Infof("instance %d cannot be reached (%v): destroying it and renting a replacement", a.InstanceID, cerr)
			if err := destroyConfirm(context.WithoutCancel(ctx), e, a.InstanceID, time.Time{}); err != nil {
				return nil, inst, err
			}
			exclude = append(exclude, a.MachineID)
		case err == nil || errors.Is(err, provider.ErrNotFound):
			// Gone or not running: destroy whatever is left, then replace.
			if err := e.Record("event", stepFailover, runstate.InstanceData{Instance: a.InstanceID, Reason: "not running when the controller resumed"}); err != nil {
				return nil, inst, err
			}
			if err := destroyConfirm(context.WithoutCancel(ctx), e, a.InstanceID, time.Time{}); err != nil {
				return nil, inst, err
			}
			exclude = append(exclude, a.MachineID)
		default:
			return nil, inst, fmt.Errorf("check instance %d before resuming: %w", a.InstanceID, err)
		}
	}
	client, inst, err := provision(ctx, e, exclude)
	if err != nil {
		return nil, inst, err
	}
	if err := verify(ctx, e, client, inst); err != nil {
		_ = client.Close() // always nil (it drops the connection, which is not used); the verify's error is the one reported
		return nil, inst, err
	}
	return client, inst, nil
}
