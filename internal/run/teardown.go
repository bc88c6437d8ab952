package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
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
	wait := time.Second
	var last error
	for {
		if c.OnIntent != nil {
			c.OnIntent(id)
		}
		err := c.Market.DestroyInstance(ctx, id)
		if err == nil {
			if c.OnDone != nil {
				c.OnDone(id)
			}
			via, cerr := c.confirm(ctx, id, label)
			if cerr == nil {
				return via, nil
			}
			last = cerr
		} else {
			last = err
			if errors.Is(err, provider.ErrAuth) {
				return nil, fmt.Errorf("destroy instance %d: %w", id, err) // retrying cannot help
			}
		}
		left := deadline.Sub(c.Clock.Now())
		if left <= 0 {
			return nil, fmt.Errorf("destroy instance %d: not confirmed before the teardown deadline: %w", id, last)
		}
		if err := clock.Sleep(ctx, c.Clock, min(wait, left)); err != nil {
			return nil, fmt.Errorf("destroy instance %d: %w (last: %v)", id, err, last)
		}
		wait = min(wait*2, 15*time.Second)
	}
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
	wait := time.Second
	for {
		list, err := c.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
		now := c.Clock.Now()
		switch {
		case err != nil:
			cleanSince = time.Time{}
		case len(list) == 0:
			if cleanSince.IsZero() {
				cleanSince = now
			}
			if now.Sub(cleanSince) >= settle {
				return destroyed, nil
			}
		default:
			cleanSince = time.Time{}
			for _, in := range list {
				if _, derr := c.DestroyConfirm(ctx, in.ID, label, deadline); derr != nil {
					return destroyed, derr
				}
				destroyed = append(destroyed, in.ID)
			}
			continue
		}
		if !now.Before(deadline) {
			if err != nil {
				return destroyed, fmt.Errorf("sweep label %s: %w", label, err)
			}
			return destroyed, fmt.Errorf("sweep label %s: not clean for %s before the deadline", label, settle)
		}
		if err := clock.Sleep(ctx, c.Clock, min(wait, settle/2+time.Millisecond, deadline.Sub(now))); err != nil {
			return destroyed, err
		}
		wait = min(wait*2, 10*time.Second)
	}
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

func (e *Engine) confirmer() Confirmer {
	return Confirmer{
		Market: e.Market, Clock: e.Clock,
		OnIntent: func(id provider.InstanceID) { e.record("intent", stepDestroy, instanceData{Instance: id}) },
		OnDone:   func(id provider.InstanceID) { e.record("done", stepDestroy, instanceData{Instance: id}) },
	}
}

// destroyConfirm destroys one instance, confirmed, before deadline (on the
// injected clock); a zero deadline means the teardown limit from now.
func (e *Engine) destroyConfirm(ctx context.Context, id provider.InstanceID, deadline time.Time) error {
	if deadline.IsZero() {
		deadline = e.now().Add(time.Duration(e.Config.Timeouts.Teardown))
	}
	via, err := e.confirmer().DestroyConfirm(ctx, id, e.state.Label, deadline)
	if err != nil {
		return err
	}
	e.record("done", stepConfirm, instanceData{Instance: id, Via: via})
	e.infof("instance %d destroyed (confirmed by %v)", id, via)
	return nil
}

// Teardown destroys every instance of the run, including any found only by
// its label, on a context detached from ctx with the configured deadline.
// An unconfirmed cleanup is escalated and returned as *CleanupError.
func (e *Engine) Teardown(ctx context.Context) error {
	// The deadline is kept on the injected clock; the context timeout is a
	// wall-clock safety net for the same limit.
	limit := time.Duration(e.Config.Timeouts.Teardown)
	deadline := e.now().Add(limit)
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
	defer cancel()
	t0 := e.now()
	defer func() { e.timings.add("teardown", e.now().Sub(t0)) }()

	// Sweep the label first: a lost create may have rented something the
	// journal never saw. A failed listing is not "none": retry it.
	var sweepErr error
	for wait := time.Second; ; wait = min(wait*2, 10*time.Second) {
		list, err := e.Market.ListInstances(tctx, provider.ListOptions{Labels: []string{e.state.Label}})
		if err == nil {
			for _, in := range list {
				if e.state.attemptFor(in.ID) == nil && !containsID(e.state.Extras, in.ID) {
					e.record("event", stepAdopt, instanceData{Instance: in.ID, Reason: "found by label at teardown"})
				}
			}
			sweepErr = nil
			break
		}
		sweepErr = err
		if !e.now().Before(deadline) || clock.Sleep(tctx, e.Clock, wait) != nil {
			break
		}
	}
	var errs []error
	for _, id := range e.state.Unconfirmed() {
		if err := e.destroyConfirm(tctx, id, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	// A rent whose outcome the journal never learned (cancelled or crashed
	// mid-create) may have rented something the listing does not show yet:
	// sweep until the label has stayed clean for a while.
	if e.state.AmbiguousRent() {
		c := e.confirmer()
		ids, err := c.SweepLabel(tctx, e.state.Label, deadline, SweepSettle)
		for _, id := range ids {
			e.record("done", stepConfirm, instanceData{Instance: id, Via: []string{"show", "label_listing"}})
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
	e.escalate(ctx, ce)
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
func (e *Engine) escalate(ctx context.Context, ce *CleanupError) {
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
				e.infof("alert webhook failed: %v", err)
			}
		}
	}
	e.record("event", stepAlert, map[string]any{"instances": ce.Instances, "webhook_sent": sent})
	e.cost.AlertSent = sent
}
