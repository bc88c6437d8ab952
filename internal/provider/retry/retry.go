// Package retry is the one place where calls to the marketplace are sent
// again. It decorates a client in the shape of restic's backend/retry: the
// decorator offers the same methods as what it wraps, runs each call
// through one policy on an injected clock, and reports each retry to a
// hook. The client below it (package vast) sends every request once and
// classifies its failures by type; this package decides, per operation,
// which of those failures may be retried.
//
// Contract:
//   - A call whose context is already done fails with ctx.Err() at once,
//     without reaching the wrapped client; a context that ends during a
//     wait ends the call with ctx.Err() (the last failure named beside it).
//   - Safe operations (reads, and writes whose repeat changes nothing more:
//     destroy, label, stop/start, attach a key, ask for logs, change a bid)
//     are retried on transport errors (provider.ErrTransport), on 5xx and
//     429 answers, and on incomplete listings.
//   - Operations whose repeat could act twice (create, add an account key,
//     execute, cloud copy) are retried on a 429 only: the rate limiter
//     refused the request before anything happened. A create whose outcome
//     is unknown is never sent again: the caller reconciles by label.
//   - Nothing is retried after an authentication error, an error that says
//     Permanent() (see poll.IsPermanent; a fenced controller's), not found,
//     offer gone, outcome unknown, or a request refused before it was sent.
//   - Waits start at Initial and double up to Max (a 429 doubles them
//     again, see package poll), are never shorter than a Retry-After, and a
//     call ends after MaxTries sends (twice that while the answers are
//     429s) or MaxElapsed, whichever comes first. The last failure is
//     returned wrapped, so errors.Is and errors.As still see it.
//   - Vast sends no Retry-After and limits per endpoint (vast-api.md
//     §12.4): the 429 retries of all calls to one endpoint draw on one
//     RateBudget; a 429 that finds it empty ends its call at once. A 429
//     body is read as text when it is not JSON, never a decode error.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
)

// Policy bounds and paces the retries of one call. Zero values pick the
// defaults named on each field.
type Policy struct {
	Clock clock.Clock // default: the wall clock
	// MaxTries bounds the sends of one call (default 5); while the answers
	// are 429s the bound is twice that, as rate limiting is transient by
	// nature.
	MaxTries int
	// MaxElapsed bounds the time one call may spend retrying (default 2m).
	MaxElapsed time.Duration
	// Initial and Max shape the waits (defaults 500ms and 20s).
	Initial, Max time.Duration
	// Jitter returns values in [0,1) that spread each wait by ±20%
	// (default math/rand); tests fix it.
	Jitter func() float64
	// Report, when set, is told of each failed send that is retried, and
	// of the wait before the next.
	Report func(op string, err error, wait time.Duration)
	// Success, when set, is told of a call that succeeded after retries.
	Success func(op string, retries int)
	// Budget bounds the 429 retries of every call to one endpoint
	// together (see RateBudget). Wrap gives its client one when nil.
	Budget *RateBudget
	// Throttled, when set, is told of each 429 retry: the endpoint and how
	// many 429 retries it has spent in the current storm, so that a storm
	// can be shown (the CLI's live line).
	Throttled func(endpoint string, spent int)
}

// kind is what a failure of an operation allows.
type kind int

const (
	// safe: sending it again changes nothing more than sending it once.
	safe kind = iota
	// once: a second send could act twice; only a refusal (429) is retried.
	once
)

// Retryable reports whether a failure err of an operation may be sent
// again; idempotent says whether repeating the operation is harmless. It
// is the whole classification the decorator applies.
func Retryable(err error, idempotent bool) bool {
	switch {
	// The caller's context is judged by the caller (call checks ctx.Err()):
	// an HTTP client timeout also says DeadlineExceeded, and it is a
	// transport error like any other.
	case err == nil,
		poll.IsPermanent(err),
		errors.Is(err, provider.ErrAuth),
		errors.Is(err, provider.ErrOutcomeUnknown),
		errors.Is(err, provider.ErrInvalidRequest),
		errors.Is(err, provider.ErrNotFound),
		errors.Is(err, provider.ErrOfferGone):
		return false
	case errors.Is(err, provider.ErrRateLimited):
		return true // refused before any effect, whatever the operation
	case !idempotent:
		return false
	case errors.Is(err, provider.ErrTransport), errors.Is(err, provider.ErrIncompleteListing):
		return true
	}
	var ae *provider.APIError
	return errors.As(err, &ae) && ae.Temporary()
}

// exhausted marks the last failure once the tries or the time are spent.
type exhausted struct {
	err   error
	tries int
}

func (e *exhausted) Error() string { return e.err.Error() }
func (e *exhausted) Unwrap() error { return e.err }

// call runs f under p as operation op of kind k.
func call[T any](ctx context.Context, p *Policy, op string, k kind, f func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err // a strict contract: a call with a done context does nothing
	}
	clk := p.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	tries := p.MaxTries
	if tries <= 0 {
		tries = 5
	}
	elapsed := p.MaxElapsed
	if elapsed <= 0 {
		elapsed = 2 * time.Minute
	}
	initial, maxWait := p.Initial, p.Max
	if initial <= 0 {
		initial = 500 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 20 * time.Second
	}
	jitter := p.Jitter
	if jitter == nil {
		jitter = rand.Float64
	}
	deadline := clk.Now().Add(elapsed)
	var out T
	var last error
	n := 0
	err := poll.Until(ctx, clk, poll.Policy{
		Initial: initial, Max: maxWait, Jitter: jitter, Deadline: deadline,
		Permanent: func(err error) bool {
			return errors.As(err, new(*exhausted)) || !Retryable(err, k == safe)
		},
		Notify: func(err error, wait time.Duration) {
			if p.Report != nil {
				p.Report(op, err, wait)
			}
		},
	}, func(ctx context.Context) (bool, error) {
		n++
		out, last = f(ctx)
		if last == nil {
			return true, nil
		}
		if !Retryable(last, k == safe) {
			return false, last
		}
		limit := tries
		if errors.Is(last, provider.ErrRateLimited) {
			limit = 2 * tries
			if p.Budget != nil && n < limit {
				ep := Endpoint(op)
				ok, spent := p.Budget.take(ep)
				if !ok {
					return false, &exhausted{err: fmt.Errorf("%w (the 429 retry budget of %q is spent: %d in this storm)", last, ep, spent), tries: n}
				}
				if p.Throttled != nil {
					p.Throttled(ep, spent)
				}
			}
		}
		// A server that asks for a wait past our bound is not asked again
		// early: the call ends now with its answer.
		if n >= limit || clk.Now().Add(poll.RetryAfter(last)).After(deadline) {
			return false, &exhausted{err: last, tries: n}
		}
		return false, last
	})
	var ex *exhausted
	switch {
	case err == nil:
		if n > 1 && p.Success != nil {
			p.Success(op, n-1)
		}
		return out, nil
	case ctx.Err() != nil:
		if last != nil && !errors.Is(last, ctx.Err()) {
			return zero, fmt.Errorf("%s: %w (last: %v)", op, ctx.Err(), last) //nolint:errorlint // the class is the cancellation; the last attempt's error is context only
		}
		return zero, fmt.Errorf("%s: %w", op, ctx.Err())
	case errors.As(err, &ex):
		return zero, fmt.Errorf("%w (sent %d times)", ex.err, ex.tries)
	case errors.Is(err, poll.ErrDeadline) && last != nil:
		// Our own bound, not the caller's deadline: poll.ErrDeadline must
		// not leak into the caller's own waits.
		return zero, fmt.Errorf("%w (sent %d times in %s)", last, n, elapsed)
	}
	return zero, err
}

// do is call for operations with no result.
func do(ctx context.Context, p *Policy, op string, k kind, f func(context.Context) error) error {
	_, err := call(ctx, p, op, k, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

func listOp(o provider.ListOptions) string {
	if len(o.Labels) > 0 {
		return "list instances labelled " + strings.Join(o.Labels, ",")
	}
	return "list instances"
}
