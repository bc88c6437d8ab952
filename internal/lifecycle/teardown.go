package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// Destroyer is what confirmed destruction needs.
type Destroyer interface {
	provider.InstanceReader
	provider.InstanceDestroyer
}

// Confirmer destroys instances and proves they are gone: absent by id AND
// absent from a complete listing of their label. It is used by the engine
// and by `vastrun down --instance/--label` without a run.
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
// ("show", "label_listing"), retrying with backoff until deadline (on
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
		return nil, fmt.Errorf("destroy instance %d: %w (last: %v)", id, ctx.Err(), last)
	}
	return nil, fmt.Errorf("destroy instance %d: %w", id, err)
}

// SweepSettle is how long a label listing must stay clean before absence
// is believed: listings can lag a rental made seconds ago.
const SweepSettle = 20 * time.Second

// SweepLabel destroys every instance carrying label, confirming each, and
// returns once complete listings have shown the label clean for settle (a
// single empty listing may just lag a fresh rental), or deadline passes.
func (c Confirmer) SweepLabel(ctx context.Context, label string, deadline time.Time, settle time.Duration) ([]provider.InstanceID, error) {
	var destroyed []provider.InstanceID
	var cleanSince time.Time
	var destroyErr error
	err := poll.Until(ctx, c.Clock, poll.Policy{Initial: time.Second, Max: min(10*time.Second, settle/2+time.Millisecond), Deadline: deadline},
		func(ctx context.Context) (bool, error) {
			list, err := c.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
			now := c.Clock.Now()
			switch {
			case err != nil:
				cleanSince = time.Time{}
				return false, err
			case len(list) == 0:
				if cleanSince.IsZero() {
					cleanSince = now
				}
				return now.Sub(cleanSince) >= settle, nil
			}
			cleanSince = time.Time{}
			for _, in := range list {
				if _, derr := c.DestroyConfirm(ctx, in.ID, label, deadline); derr != nil {
					destroyErr = derr
					return true, nil // stop: DestroyConfirm already spent the time
				}
				destroyed = append(destroyed, in.ID)
			}
			return false, nil
		})
	var de *poll.DeadlineError
	switch {
	case destroyErr != nil:
		return destroyed, destroyErr
	case err == nil:
		return destroyed, nil
	case errors.As(err, &de) && de.Last != nil:
		return destroyed, fmt.Errorf("sweep label %s: %w", label, de.Last)
	case errors.As(err, &de):
		return destroyed, fmt.Errorf("sweep label %s: not clean for %s before the deadline", label, settle)
	}
	return destroyed, err
}

func (c Confirmer) confirm(ctx context.Context, id provider.InstanceID, label string) ([]string, error) {
	_, err := c.Market.ShowInstance(ctx, id)
	switch {
	case err == nil:
		return nil, fmt.Errorf("instance %d: %w", id, ErrStillPresent)
	case !errors.Is(err, provider.ErrNotFound):
		return nil, fmt.Errorf("confirm instance %d: %w", id, err)
	}
	via := []string{"show"}
	if label != "" {
		list, err := c.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
		if err != nil {
			return nil, fmt.Errorf("confirm instance %d by label: %w", id, err)
		}
		for _, in := range list {
			if in.ID == id {
				return nil, fmt.Errorf("instance %d still listed under label %s: %w", id, label, ErrStillPresent)
			}
		}
		via = append(via, "label_listing")
	}
	return via, nil
}

func confirmer(e *Scope) Confirmer {
	return Confirmer{
		Market: e.Market, Clock: e.Clock,
		// Destroying is the safe side effect: it goes ahead even when its
		// intent cannot be journaled (the run then fails on ErrJournal).
		OnIntent: func(id provider.InstanceID) { e.Record("intent", stepDestroy, runstate.InstanceData{Instance: id}) },
		OnDone:   func(id provider.InstanceID) { e.Record("done", stepDestroy, runstate.InstanceData{Instance: id}) },
	}
}

// destroyConfirm destroys one instance, confirmed, before deadline (on the
// injected clock); a zero deadline means the teardown limit from now.
func destroyConfirm(ctx context.Context, e *Scope, id provider.InstanceID, deadline time.Time) error {
	if deadline.IsZero() {
		deadline = e.Now().Add(e.TeardownLimit())
	}
	via, err := confirmer(e).DestroyConfirm(ctx, id, e.state.Label, deadline)
	if err != nil {
		return err
	}
	// A confirmation the journal cannot hold is still a confirmation: it is
	// kept in memory for the receipt, and the run fails on the journal error.
	e.Record("done", stepConfirm, runstate.InstanceData{Instance: id, Via: via})
	e.Infof("instance %d destroyed (confirmed by %v)", id, via)
	return nil
}

// Teardown destroys every instance of the run, including any found only by
// its label, on a context detached from ctx with the configured deadline.
// An unconfirmed cleanup is escalated and returned as *CleanupError.
func (e *Scope) Teardown(ctx context.Context) error {
	// The deadline is kept on the injected clock; the context timeout is a
	// wall-clock safety net for the same limit.
	limit := e.TeardownLimit()
	deadline := e.Now().Add(limit)
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
	defer cancel()
	t0 := e.Now()
	defer func() { e.timings.add("teardown", e.Now().Sub(t0)) }()

	// Sweep the label first: a lost create may have rented something the
	// journal never saw. A failed listing is not "none": retry it.
	var sweepErr error
	var found []provider.InstanceID
	err := poll.Until(tctx, e.Clock, poll.Policy{Initial: time.Second, Max: 10 * time.Second, Deadline: deadline}, func(ctx context.Context) (bool, error) {
		list, err := e.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{e.state.Label}})
		for _, in := range list {
			found = append(found, in.ID)
		}
		return err == nil, err
	})
	if err != nil {
		sweepErr = err
	}
	for _, id := range found {
		if e.state.AttemptFor(id) == nil && !containsID(e.state.Extras, id) {
			e.Record("event", stepAdopt, runstate.InstanceData{Instance: id, Reason: "found by label at teardown"})
		}
	}
	var errs []error
	for _, id := range e.state.Unconfirmed() {
		if err := destroyConfirm(tctx, e, id, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	// A rent whose outcome the journal never learned (cancelled or crashed
	// mid-create) may have rented something the listing does not show yet:
	// sweep until the label has stayed clean for a while.
	if e.state.AmbiguousRent() {
		c := confirmer(e)
		ids, err := c.SweepLabel(tctx, e.state.Label, deadline, SweepSettle)
		for _, id := range ids {
			e.Record("done", stepConfirm, runstate.InstanceData{Instance: id, Via: []string{"show", "label_listing"}})
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if sweepErr != nil {
		errs = append(errs, fmt.Errorf("label %s could not be listed completely: %w", e.state.Label, sweepErr))
	}
	if len(errs) == 0 {
		return nil
	}
	ce := &CleanupError{Label: e.state.Label, Instances: e.state.Unconfirmed(), Err: errors.Join(errs...)}
	escalate(ctx, e, ce)
	return ce
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
				res.Body.Close()
				sent = res.StatusCode < 300
			} else {
				e.Infof("alert webhook failed: %v", err)
			}
		}
	}
	e.Record("event", stepAlert, map[string]any{"instances": ce.Instances, "webhook_sent": sent})
	e.cost.AlertSent = sent
}
