// Package retry is a marketplace decorator that retries failed calls with
// backoff on an injected clock, in the shape of restic's backend/retry: it
// embeds the wrapped marketplace, keeps its interface, and asks one
// function ([IsPermanent]) whether an error is worth retrying.
//
// Contract:
//   - A call whose context is already cancelled fails with ctx.Err() at once,
//     without reaching the wrapped marketplace.
//   - Reads (search, show, list, charges) and idempotent writes (destroy,
//     attach an SSH key) are retried on transient errors (5xx, 429,
//     transport, incomplete listings) until MaxTries calls were made or the
//     context ends; a 429 doubles the wait (see package poll).
//   - CreateInstance is never retried: a create whose outcome is unknown
//     may have rented, so the engine reconciles it by label instead.
//   - Permanent errors (auth, not found, offer gone, outcome unknown, any
//     other 4xx) are returned at once, unwrapped, so errors.Is still works.
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
)

// Inner is what the decorator wraps: the engine's view of a marketplace.
type Inner interface {
	provider.OfferSearcher
	provider.InstanceCreator
	provider.InstanceReader
	provider.InstanceDestroyer
	AttachSSHKey(ctx context.Context, id provider.InstanceID, publicKey string) error
	Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error)
}

// Market retries the calls of the embedded Inner.
type Market struct {
	Inner
	Clock clock.Clock // default: the wall clock
	// MaxTries bounds the calls made for one operation (default 5).
	MaxTries int
	// Initial and Max shape the waits (defaults 1s and 15s).
	Initial, Max time.Duration
	// Report, when set, is told about each failed try that will be retried.
	Report func(op string, err error, next int)
}

var _ Inner = (*Market)(nil)

// New wraps m with the default policy on clk.
func New(m Inner, clk clock.Clock) *Market { return &Market{Inner: m, Clock: clk} }

// IsPermanent reports whether retrying err cannot help.
func IsPermanent(err error) bool {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, provider.ErrAuth), errors.Is(err, provider.ErrNotFound),
		errors.Is(err, provider.ErrOfferGone), errors.Is(err, provider.ErrOutcomeUnknown):
		return true
	}
	var ae *provider.APIError
	if errors.As(err, &ae) {
		return ae.Status >= 400 && ae.Status < 500 && !ae.Temporary()
	}
	return false
}

func (m *Market) do(ctx context.Context, op string, f func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err // a strict contract: a cancelled call does nothing
	}
	clk := m.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	tries := m.MaxTries
	if tries <= 0 {
		tries = 5
	}
	var last error
	n := 0
	err := poll.Until(ctx, clk, poll.Policy{Initial: m.Initial, Max: m.Max, Permanent: final}, func(ctx context.Context) (bool, error) {
		n++
		last = f(ctx)
		if last == nil {
			return true, nil
		}
		if IsPermanent(last) {
			return false, last
		}
		if n >= tries {
			return false, &exhausted{last}
		}
		if m.Report != nil {
			m.Report(op, last, n+1)
		}
		return false, last
	})
	var ex *exhausted
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ex):
		return fmt.Errorf("%s: gave up after %d tries: %w", op, n, ex.err)
	case ctx.Err() != nil && last != nil:
		return fmt.Errorf("%s: %w (last: %v)", op, ctx.Err(), last)
	}
	return err
}

// final stops the wait on a permanent error or once the tries are spent.
func final(err error) bool {
	var ex *exhausted
	return errors.As(err, &ex) || IsPermanent(err)
}

// exhausted marks the last try's error once the tries are spent.
type exhausted struct{ err error }

func (e *exhausted) Error() string { return e.err.Error() }
func (e *exhausted) Unwrap() error { return e.err }

// SearchOffers retries a search.
func (m *Market) SearchOffers(ctx context.Context, q provider.Query) (out []provider.Offer, err error) {
	err = m.do(ctx, "search offers", func(ctx context.Context) (err error) {
		out, err = m.Inner.SearchOffers(ctx, q)
		return err
	})
	return out, err
}

// CreateInstance is passed through once: see the package contract.
func (m *Market) CreateInstance(ctx context.Context, r provider.CreateRequest) (provider.CreateResult, error) {
	if err := ctx.Err(); err != nil {
		return provider.CreateResult{}, err
	}
	return m.Inner.CreateInstance(ctx, r)
}

// ShowInstance retries a read of one instance; not found is final.
func (m *Market) ShowInstance(ctx context.Context, id provider.InstanceID) (out provider.Instance, err error) {
	err = m.do(ctx, fmt.Sprintf("show instance %d", id), func(ctx context.Context) (err error) {
		out, err = m.Inner.ShowInstance(ctx, id)
		return err
	})
	return out, err
}

// ListInstances retries a listing, including an incomplete one.
func (m *Market) ListInstances(ctx context.Context, o provider.ListOptions) (out []provider.Instance, err error) {
	err = m.do(ctx, "list instances", func(ctx context.Context) (err error) {
		out, err = m.Inner.ListInstances(ctx, o)
		return err
	})
	return out, err
}

// DestroyInstance retries a destroy (destroying twice is harmless).
func (m *Market) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	return m.do(ctx, fmt.Sprintf("destroy instance %d", id), func(ctx context.Context) error {
		return m.Inner.DestroyInstance(ctx, id)
	})
}

// AttachSSHKey retries attaching a key (attaching twice is harmless).
func (m *Market) AttachSSHKey(ctx context.Context, id provider.InstanceID, key string) error {
	return m.do(ctx, fmt.Sprintf("attach SSH key to instance %d", id), func(ctx context.Context) error {
		return m.Inner.AttachSSHKey(ctx, id, key)
	})
}

// Charges retries a read of the charges.
func (m *Market) Charges(ctx context.Context, q provider.ChargeQuery) (out []provider.Charge, err error) {
	err = m.do(ctx, "read charges", func(ctx context.Context) (err error) {
		out, err = m.Inner.Charges(ctx, q)
		return err
	})
	return out, err
}
