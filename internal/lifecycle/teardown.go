package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/notify"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// Destroyer is what confirmed destruction needs.
type Destroyer interface {
	provider.InstanceReader
	provider.InstanceDestroyer
}

// Confirmer destroys instances and proves they are gone. One instance
// (DestroyConfirm) is absent by id (the API answers 404 for it), and, when
// a complete listing of its label can be had, absent from it too: that
// listing is evidence, never a condition. Many (DestroyConfirmAll,
// SweepLabel) are destroyed in bulk and each proven gone by id or by its
// absence from a complete listing of its label, so their cleanup costs a
// few calls, not three per instance; a listing that fails or is
// rate-limited never keeps a destroyed id from being confirmed by id. It
// is used by the engine and by `vastrun down` and `reap` without a run.
type Confirmer struct {
	Market Destroyer
	Clock  clock.Clock
	// OnIntent and OnDone journal each destroy attempt, when set.
	OnIntent func(id provider.InstanceID)
	OnDone   func(id provider.InstanceID)
}

// ErrStillPresent means a destroyed instance is still visible.
var ErrStillPresent = errors.New("instance still present after destroy")

// DestroyConfirm destroys id and returns the evidence of its absence
// ("show", and "label_listing" when label is set and one listing of it
// completed without the id), retrying with backoff until deadline (on
// c.Clock) passes or ctx ends.
func (c Confirmer) DestroyConfirm(ctx context.Context, id provider.InstanceID, label string, deadline time.Time) ([]string, error) {
	var via []string
	var last error
	err := poll.Until(ctx, c.Clock, poll.Policy{Initial: time.Second, Max: 15 * time.Second, Deadline: deadline}, func(ctx context.Context) (bool, error) {
		if c.OnIntent != nil {
			c.OnIntent(id)
		}
		if last = c.Market.DestroyInstance(ctx, id); last != nil {
			return false, last // auth ends the wait: retrying cannot help
		}
		if c.OnDone != nil {
			c.OnDone(id)
		}
		via, last = c.confirm(ctx, id, label)
		return last == nil, last
	})
	switch {
	case err == nil:
		return via, nil
	case errors.Is(err, poll.ErrDeadline):
		return nil, fmt.Errorf("destroy instance %d: not confirmed before the teardown deadline: %w", id, last)
	case ctx.Err() != nil && last != nil:
		return nil, fmt.Errorf("destroy instance %d: %w (last: %v)", id, ctx.Err(), last) //nolint:errorlint // the class is the context's end; the last answer is detail, as in remote's retries
	}
	return nil, fmt.Errorf("destroy instance %d: %w", id, err)
}

// SweepSettle is how long a label listing must stay clean before absence
// is believed: listings can lag a rental made seconds ago.
const SweepSettle = 20 * time.Second

// SweepLabel destroys every instance carrying label, confirming each, and
// returns once complete listings have shown the label clean for settle (a
// single empty listing may just lag a fresh rental), or deadline passes.
// It costs a few calls whatever the label holds: what a listing shows is
// destroyed in bulk (destroyAll), and the next complete listing, made at
// once, confirms every destroyed id it no longer shows; only ids it still
// shows are read by id (404: gone, the listing lags) and destroyed again.
func (c Confirmer) SweepLabel(ctx context.Context, label string, deadline time.Time, settle time.Duration) ([]provider.InstanceID, error) {
	var destroyed []provider.InstanceID
	sent := map[provider.InstanceID]bool{} // destroyed, not yet confirmed
	var cleanSince time.Time
	var destroyErr error
	err := poll.Until(ctx, c.Clock, poll.Policy{Initial: time.Second, Max: min(10*time.Second, settle/2+time.Millisecond), Deadline: deadline},
		func(ctx context.Context) (bool, error) {
			// List, destroy what is listed, and list again at once: the
			// second listing is the first's confirmation.
			for look := 0; look < 2; look++ {
				list, err := c.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}, Brief: true})
				now := c.Clock.Now()
				if err != nil {
					cleanSince = time.Time{}
					return false, err
				}
				listed := make(map[provider.InstanceID]bool, len(list))
				for _, in := range list {
					listed[in.ID] = true
				}
				for _, id := range slices.Sorted(maps.Keys(sent)) {
					if !listed[id] { // absent from a complete listing of its label
						destroyed = append(destroyed, id)
						delete(sent, id)
					}
				}
				if len(list) == 0 {
					if cleanSince.IsZero() {
						cleanSince = now
					}
					return now.Sub(cleanSince) >= settle, nil
				}
				cleanSince = time.Time{}
				var fresh, again []provider.InstanceID
				for _, in := range list {
					switch {
					case !sent[in.ID]:
						fresh = append(fresh, in.ID)
					case isGone(ctx, c.Market, in.ID):
						// Destroyed and gone by id: the listing lags.
						destroyed = append(destroyed, in.ID)
						delete(sent, in.ID)
					default:
						again = append(again, in.ID)
					}
				}
				// New ones in bulk; one that outlived a destroy on its own.
				if destroyErr = c.destroyAll(ctx, fresh, true); destroyErr != nil {
					return true, nil // authentication: retrying cannot help
				}
				if destroyErr = c.destroyAll(ctx, again, false); destroyErr != nil {
					return true, nil
				}
				for _, id := range fresh {
					sent[id] = true
				}
			}
			return false, nil
		})
	var de *poll.DeadlineError
	switch {
	case destroyErr != nil:
		return destroyed, fmt.Errorf("sweep label %s: %w", label, destroyErr)
	case err == nil:
		return destroyed, nil
	case errors.As(err, &de) && len(sent) > 0:
		return destroyed, fmt.Errorf("sweep label %s: instances %v: %w", label, slices.Sorted(maps.Keys(sent)), ErrStillPresent)
	case errors.As(err, &de) && de.Last != nil:
		return destroyed, fmt.Errorf("sweep label %s: %w", label, de.Last)
	case errors.As(err, &de):
		return destroyed, fmt.Errorf("sweep label %s: not clean for %s before the deadline", label, settle)
	}
	return destroyed, err
}

// isGone says whether a read of id answers that it does not exist.
func isGone(ctx context.Context, r provider.InstanceReader, id provider.InstanceID) bool {
	_, err := r.ShowInstance(ctx, id)
	return errors.Is(err, provider.ErrNotFound)
}

// confirm proves id gone: by id (a 404), then, when label is set, by one
// listing of the label that completes without it. A listing that fails
// leaves the id confirmed by id alone; one that still has it is not a
// confirmation.
func (c Confirmer) confirm(ctx context.Context, id provider.InstanceID, label string) ([]string, error) {
	_, err := c.Market.ShowInstance(ctx, id)
	switch {
	case err == nil:
		return nil, fmt.Errorf("instance %d: %w", id, ErrStillPresent)
	case !errors.Is(err, provider.ErrNotFound):
		return nil, fmt.Errorf("confirm instance %d: %w", id, err)
	}
	via := []string{viaShow}
	if label == "" {
		return via, nil
	}
	list, err := c.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}, Brief: true})
	if err != nil {
		return via, nil // gone by id; the listing would only have added evidence
	}
	for _, in := range list {
		if in.ID == id {
			return nil, fmt.Errorf("instance %d still listed under label %s: %w", id, label, ErrStillPresent)
		}
	}
	return append(via, viaLabelListing), nil
}

// The evidence of a confirmed destruction (receipt attempts[].confirmed_by).
const (
	viaShow         = "show"
	viaLabelListing = "label_listing"
)

func confirmer(e *Scope) Confirmer {
	return Confirmer{
		Market: e.Market, Clock: e.Clock,
		// Destroying is the safe side effect: it goes ahead even when its
		// intent cannot be journaled (the run then fails on ErrJournal,
		// which Record keeps: settle, Down and resumeFinished return it).
		OnIntent: func(id provider.InstanceID) {
			e.Record("intent", stepDestroy, runstate.InstanceData{Instance: id}) //nolint:errcheck // kept as the run's journal error (see above)
		},
		OnDone: func(id provider.InstanceID) {
			e.Record("done", stepDestroy, runstate.InstanceData{Instance: id}) //nolint:errcheck // kept as the run's journal error (see above)
		},
	}
}

// destroyConfirm destroys one instance, confirmed by id, before deadline
// (on the injected clock); a zero deadline means the teardown limit from
// now. It never lists the label: the teardown's sweep does, once, and a
// clean listing there adds its evidence to every confirmed id
// (listedClean).
func destroyConfirm(ctx context.Context, e *Scope, id provider.InstanceID, deadline time.Time) error {
	if deadline.IsZero() {
		deadline = e.Now().Add(e.TeardownLimit())
	}
	via, err := confirmer(e).DestroyConfirm(ctx, id, "", deadline)
	if err != nil {
		return err
	}
	recordConfirmed(e, id, via)
	return nil
}

// recordConfirmed journals id's confirmed destruction and its evidence.
func recordConfirmed(e *Scope, id provider.InstanceID, via []string) {
	// A confirmation the journal cannot hold is still a confirmation: it is
	// kept in memory for the receipt, and the run fails on the journal error.
	e.Record("done", stepConfirm, runstate.InstanceData{Instance: id, Via: via}) //nolint:errcheck // Record keeps a failed write as the run's journal error, which the run returns
	e.Infof("instance %d destroyed (confirmed by %v)", id, via)
}

// listedClean notes a complete, clean listing of the run's label, just
// made: its time (sweepLate needs one after its window), and its evidence
// for every instance confirmed gone by id before it.
func listedClean(e *Scope) {
	e.labelCleanAt = e.Now()
	for _, a := range e.state.Attempts {
		if !a.Confirmed || a.InstanceID == 0 || slices.Contains(a.ConfirmedBy, viaLabelListing) {
			continue
		}
		via := append(slices.Clone(a.ConfirmedBy), viaLabelListing)
		e.Record("event", stepConfirm, runstate.InstanceData{Instance: a.InstanceID, Via: via}) //nolint:errcheck // evidence added to a confirmation; a failed write is kept as the run's journal error, which the run returns
		e.Infof("instance %d confirmed by %v: label %s listed without it", a.InstanceID, via, e.state.Label)
	}
}

// LateCreateWindow is how long after a create judged not rented its
// instance may still appear: Vast has processed a create 200 s after it
// was sent (docs/journal.md), and the window covers that with room.
const LateCreateWindow = 5 * time.Minute

// Teardown destroys every instance of the run on a context detached from
// ctx, within the configured deadline, in this order:
//
//  1. every instance the journal knows, confirmed by id: it needs no
//     listing, so a listing that fails or is rate-limited never delays it;
//  2. one sweep of the run's label for instances the journal does not
//     know (a lost create's rental, a duplicate), adopted before they are
//     destroyed; after a create whose outcome was never learned, until the
//     label has stayed clean for SweepSettle. Its retries stop at the
//     deadline. When every known id is confirmed gone and nothing makes
//     an unknown one likely, a listing that never completes is a warning
//     (the receipt's cleanup.warnings), not a failure;
//  3. after a create judged not rented, a watch of the label until
//     LateCreateWindow after that create was sent (sweepLate).
//
// An unconfirmed cleanup is escalated and returned as *CleanupError.
// TeardownAll does the same for several runs at once, in fewer calls.
func (e *Scope) Teardown(ctx context.Context) error {
	t := startTeardown(ctx, e)
	for _, id := range e.state.Unconfirmed() {
		if err := destroyConfirm(t.ctx, e, id, t.deadline); err != nil {
			t.errs = append(t.errs, err)
		}
	}
	return t.finish(ctx, false)
}

// teardown is one run's teardown under way: its deadline, kept on the
// injected clock, its context, detached from the caller's with a
// wall-clock safety net for the same limit, and the errors of step 1.
type teardown struct {
	e        *Scope
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
	t0       time.Time
	errs     []error
}

func startTeardown(ctx context.Context, e *Scope) *teardown {
	limit := e.TeardownLimit()
	t0 := e.Now()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
	return &teardown{e: e, ctx: tctx, cancel: cancel, deadline: t0.Add(limit), t0: t0}
}

// finish runs steps 2 and 3 of Teardown after step 1 (t.errs) and ends
// the teardown. listed says a complete listing of the run's label, made
// after step 1, showed it clean (TeardownAll's shared listing): the
// sweep's own first listing would only repeat it, so it is skipped unless
// the sweep must see the label stay clean for a while.
func (t *teardown) finish(ctx context.Context, listed bool) error {
	e := t.e
	defer t.cancel()
	defer func() { e.timings.add("teardown", e.Now().Sub(t.t0)) }()
	errs := t.errs
	settle := time.Duration(0)
	if e.state.AmbiguousRent() {
		// A rent whose outcome the journal never learned (cancelled or
		// crashed mid-create) may have rented something the listing does
		// not show yet.
		settle = SweepSettle
	}
	var incomplete *incompleteSweepError
	sweep := func() error { return sweepLabel(t.ctx, e, t.deadline, settle) }
	if listed && settle == 0 {
		sweep = func() error { listedClean(e); return nil }
	}
	switch err := sweep(); {
	case err == nil:
	case errors.As(err, &incomplete) && settle == 0 && len(errs) == 0 && len(e.state.Unconfirmed()) == 0:
		if !e.state.PossiblyLiveSince.IsZero() {
			break // sweepLate lists the label again, and fails if it never can
		}
		e.warn(fmt.Sprintf("%v; every instance this run knew of is confirmed destroyed by id, but one it did not know of would have been missed: check with `vastrun down --label %s`", err, e.state.Label))
	default:
		errs = append(errs, err)
	}
	if err := sweepLate(ctx, e, t.t0); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	ce := &CleanupError{Label: e.state.Label, Instances: e.state.Unconfirmed(), Err: errors.Join(errs...)}
	escalate(ctx, e, ce)
	return ce
}

// warn notes what the cleanup could not check although nothing it knew of
// is left: one line on stderr, and the receipt's cleanup.warnings.
func (e *Run) warn(msg string) {
	e.cleanupWarnings = append(e.cleanupWarnings, msg)
	e.Infof("warning: %s", msg)
}

// incompleteSweepError means the label was never listed clean before the
// teardown deadline: every listing failed, or the last one still had
// instances (destroyed since).
type incompleteSweepError struct {
	Label string
	Last  error // the last listing's error; nil when the listings completed
}

func (e *incompleteSweepError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("label %s was not listed clean before the teardown deadline", e.Label)
	}
	return fmt.Sprintf("label %s could not be listed completely before the teardown deadline: %v", e.Label, e.Last)
}

func (e *incompleteSweepError) Unwrap() error { return e.Last }

// sweepLabel lists the run's label until a complete listing shows it
// clean (for settle, when settle > 0), destroying and confirming whatever
// carries it, each adopted first when the journal did not know it. Its
// listings, and their own retries, stop at deadline.
func sweepLabel(ctx context.Context, e *Scope, deadline time.Time, settle time.Duration) error {
	bctx, cancel := boundOnClock(ctx, e.Clock, deadline.Add(listSlack))
	defer cancel()
	var cleanSince time.Time
	var stop, last error
	maxWait := 10 * time.Second
	if settle > 0 {
		maxWait = min(maxWait, settle/2+time.Millisecond) // look again within the settle
	}
	err := poll.Until(bctx, e.Clock, poll.Policy{Initial: time.Second, Max: maxWait, Deadline: deadline}, func(ctx context.Context) (bool, error) {
		list, err := e.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{e.state.Label}, Brief: true})
		if err != nil {
			cleanSince, last = time.Time{}, err
			return false, err
		}
		last = nil
		now := e.Now()
		if len(list) == 0 {
			if cleanSince.IsZero() {
				cleanSince = now
				listedClean(e)
			}
			return now.Sub(cleanSince) >= settle, nil
		}
		cleanSince = time.Time{}
		reason := "found by label at teardown"
		if !e.state.PossiblyLiveSince.IsZero() {
			reason = runstate.ReasonLateCreate // the create judged not rented did rent
		}
		for _, in := range list {
			if stop = destroyFound(ctx, e, in.ID, deadline, reason); stop != nil {
				return true, nil
			}
		}
		return false, nil
	})
	var de *poll.DeadlineError
	switch {
	case stop != nil:
		return stop
	case err == nil:
		return nil
	case errors.As(err, &de), bctx.Err() != nil && ctx.Err() == nil:
		if settle > 0 && last == nil {
			return fmt.Errorf("sweep label %s: not clean for %s before the deadline", e.state.Label, settle)
		}
		return &incompleteSweepError{Label: e.state.Label, Last: last}
	}
	return fmt.Errorf("sweep label %s: %w", e.state.Label, err)
}

// listSlack lets a listing sent at the deadline answer.
const listSlack = 5 * time.Second

// destroyFound destroys and confirms an instance a label listing showed:
// adopted first (journaled with reason) when the journal does not know it.
func destroyFound(ctx context.Context, e *Scope, id provider.InstanceID, deadline time.Time, reason string) error {
	if a := e.state.AttemptFor(id); a != nil && a.Confirmed {
		// Gone by id, yet listed: a listing that lags, or a destroy that
		// did nothing. Destroying again is harmless; the journaled
		// confirmation (and its time, which the cost counts to) stands.
		_, err := confirmer(e).DestroyConfirm(ctx, id, "", deadline)
		return err
	}
	if e.state.AttemptFor(id) == nil && !containsID(e.state.Extras, id) {
		// Destroying is the safe side: it goes ahead even when the journal
		// cannot say so (the run fails on ErrJournal).
		e.Record("event", stepAdopt, runstate.InstanceData{Instance: id, Reason: reason}) //nolint:errcheck // kept as the run's journal error, which the run returns
		e.Infof("instance %d carries label %s (%s): destroying it", id, e.state.Label, reason)
	}
	return destroyConfirm(ctx, e, id, deadline)
}

// sweepLate watches the run's label after a create judged not rented
// (State.PossiblyLiveSince): Vast can process a create minutes after it
// was sent, so until LateCreateWindow after that create it lists the
// label, destroying whatever appears (adopted first as a late create),
// and it ends with a complete, clean listing made after the window (on a
// run torn down after the window, the sweep's own clean listing is that).
// It ends by the teardown limit after the window or after the teardown
// began (start), whichever is later.
func sweepLate(ctx context.Context, e *Scope, start time.Time) error {
	since := e.state.PossiblyLiveSince
	if since.IsZero() {
		return nil
	}
	until := since.Add(LateCreateWindow)
	if !e.labelCleanAt.Before(until) {
		return nil // the sweep just listed it clean, after the window
	}
	now := e.Now()
	// Room after the window for a last listing and a destroy.
	deadline := maxTime(until, start).Add(e.TeardownLimit())
	e.observeWatch(deadline)
	if now.Before(until) {
		e.Infof("a create of this run was judged not rented after an ambiguous answer; Vast can process a create minutes late, so label %s is watched for %s more", e.state.Label, until.Sub(now).Round(time.Second))
	}
	// The wait is kept on the injected clock; the context timeout is a
	// wall-clock safety net for it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(deadline.Sub(now), 0)+30*time.Second)
	defer cancel()
	bctx, cancelB := boundOnClock(wctx, e.Clock, deadline.Add(listSlack))
	defer cancelB()
	var stop, last error
	err := poll.Until(bctx, e.Clock, poll.Policy{Initial: 5 * time.Second, Max: 15 * time.Second, Jitter: e.jitter(), Deadline: deadline}, func(ctx context.Context) (bool, error) {
		list, err := e.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{e.state.Label}, Brief: true})
		if err != nil {
			last = err
			return false, err
		}
		last = nil
		for _, in := range list {
			if stop = destroyFound(ctx, e, in.ID, deadline, runstate.ReasonLateCreate); stop != nil {
				return true, nil
			}
		}
		if len(list) > 0 {
			return false, nil // list again: a clean listing ends the watch
		}
		listedClean(e)
		return !e.Now().Before(until), nil
	})
	switch {
	case stop != nil:
		return stop
	case err == nil:
		return nil
	case last != nil:
		return fmt.Errorf("label %s, possibly live since an ambiguous create, could not be listed clean after the late-create window: %w", e.state.Label, last)
	}
	return fmt.Errorf("label %s, possibly live since an ambiguous create, was not listed clean after the late-create window: %w", e.state.Label, err)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// boundOnClock bounds ctx by deadline read on clk, so that a call that
// retries on its own (the retry decorator's listing) stops there too.
// Only clocks whose instants map to the wall clock (the real one, the
// simulator's scaled one) can bound a context; on a test's manual clock
// the caller's own polls keep the deadline.
func boundOnClock(ctx context.Context, clk clock.Clock, deadline time.Time) (context.Context, context.CancelFunc) {
	switch c := clk.(type) {
	case clock.Real:
		return context.WithDeadline(ctx, deadline)
	case *clock.Scaled:
		return context.WithDeadline(ctx, c.Wall(deadline))
	}
	return context.WithCancel(ctx)
}

// alert is the webhook payload for an unconfirmed cleanup.
type alert struct {
	Event       string                `json:"event"`
	RunID       string                `json:"run_id"`
	Label       string                `json:"label"`
	InstanceIDs []provider.InstanceID `json:"instance_ids"`
	Message     string                `json:"message"`
	CIRun       string                `json:"ci_run,omitempty"`
	Simulated   bool                  `json:"simulated"`
}

// escalate makes an unconfirmed cleanup impossible to miss.
func escalate(ctx context.Context, e *Scope, ce *CleanupError) {
	msg := fmt.Sprintf("vastrun could not confirm destruction of instance(s) %v (label %s); they may still be billing. Destroy them with: vastrun down --label %s", ce.Instances, ce.Label, ce.Label)
	e.CI.Annotate(e.annotationWriter(), "error", msg)
	url := e.Config.Alert.Webhook
	if v := e.Getenv("VASTRUN_ALERT_WEBHOOK"); v != "" {
		url = v
	}
	sent := false
	if url != "" {
		body, _ := json.Marshal(alert{Event: "vastrun.cleanup_unconfirmed", RunID: e.state.RunID, Label: ce.Label,
			InstanceIDs: ce.Instances, Message: e.Redactor.String(msg), CIRun: e.CI.RunURL, Simulated: e.Simulated})
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			client := e.HTTP
			if client == nil {
				client = http.DefaultClient
			}
			if res, err := client.Do(req); err == nil {
				_ = res.Body.Close() // only the status is read; the body's close cannot change whether the alert went
				sent = res.StatusCode < 300
			} else {
				e.Infof("alert webhook failed: %v", err)
			}
		}
	}
	if e.Notify != nil && e.Notify.Sender != nil {
		e.Notify.send(e.Run, notify.CleanupUnconfirmed, 0, "", nil, msg)
	}
	// The teardown already fails (ce); a journal that cannot hold the alert
	// is kept as the run's journal error too.
	e.Record("event", stepAlert, map[string]any{"instances": ce.Instances, "webhook_sent": sent}) //nolint:errcheck // see above: the run fails on ce either way
	e.cost.AlertSent = sent
}
