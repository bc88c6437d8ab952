package retry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
)

// waitClock advances a fake clock as soon as a wait starts and records
// each wait; onWait, when set, runs first (to end a context mid-wait).
type waitClock struct {
	f      *clock.Fake
	waits  *[]time.Duration
	onWait func()
}

func (c waitClock) Now() time.Time { return c.f.Now() }
func (c waitClock) After(d time.Duration) <-chan time.Time {
	*c.waits = append(*c.waits, d)
	if c.onWait != nil {
		c.onWait()
		return make(chan time.Time) // never fires: only the context ends it
	}
	ch := c.f.After(d)
	c.f.Advance(d)
	return ch
}

// script is a Surface whose few methods under test answer from a list of
// errors, one per send (nil: success); the rest of the surface is nil and
// never called.
type script struct {
	retry.Surface
	errs  []error
	sends int
}

func (s *script) next() error {
	s.sends++
	if s.sends > len(s.errs) {
		return s.errs[len(s.errs)-1]
	}
	return s.errs[s.sends-1]
}

func (s *script) ShowInstance(context.Context, provider.InstanceID) (provider.Instance, error) {
	if err := s.next(); err != nil {
		return provider.Instance{}, err
	}
	return provider.Instance{ID: 9}, nil
}

func (s *script) ListInstances(context.Context, provider.ListOptions) ([]provider.Instance, error) {
	return nil, s.next()
}

func (s *script) DestroyInstance(context.Context, provider.InstanceID) error { return s.next() }

func (s *script) CreateInstance(context.Context, provider.CreateRequest) (provider.CreateResult, error) {
	if err := s.next(); err != nil {
		return provider.CreateResult{}, err
	}
	return provider.CreateResult{InstanceID: 9}, nil
}

// fenced says of itself that retrying cannot help, as team.FenceError does.
type fenced struct{}

func (fenced) Error() string   { return "destroy instance 9: lease lost" }
func (fenced) Permanent() bool { return true }

func apiErr(status int, code string) error {
	return &provider.APIError{Op: "show instance 9", Status: status, Code: code}
}

func TestPolicyTable(t *testing.T) {
	transport := &provider.TransportError{Op: "show instance 9", Err: errors.New("connection reset by peer")}
	limited := apiErr(429, "")
	asked := &provider.APIError{Op: "show instance 9", Status: 429, RetryAfter: 7 * time.Second}
	askedTooLong := &provider.APIError{Op: "show instance 9", Status: 503, RetryAfter: time.Hour}
	unknown := &provider.OutcomeUnknownError{Op: "create instance from offer 3", Label: "vastrun-x", Err: apiErr(502, "")}
	incomplete := fmt.Errorf("list instances: page 2: %w (%w)", provider.ErrIncompleteListing, apiErr(503, ""))
	s := time.Second
	ms := time.Millisecond
	tests := []struct {
		name      string
		op        string // show, list, destroy, create
		errs      []error
		policy    retry.Policy
		wantSends int
		wantErr   error // nil: success
		wantWaits []time.Duration
	}{
		{name: "502 is retried", op: "show", errs: []error{apiErr(502, ""), apiErr(502, ""), nil},
			wantSends: 3, wantWaits: []time.Duration{500 * ms, s}},
		{name: "500 is retried", op: "show", errs: []error{apiErr(500, "server_error"), nil}, wantSends: 2, wantWaits: []time.Duration{500 * ms}},
		{name: "transport error is retried", op: "show", errs: []error{transport, nil}, wantSends: 2, wantWaits: []time.Duration{500 * ms}},
		{name: "429 doubles the interval", op: "show", errs: []error{limited, limited, nil},
			wantSends: 3, wantWaits: []time.Duration{s, 2 * s}},
		{name: "429 honours Retry-After", op: "show", errs: []error{asked, nil}, wantSends: 2, wantWaits: []time.Duration{7 * s}},
		{name: "a Retry-After past the bound ends the call", op: "show", errs: []error{askedTooLong, nil},
			wantSends: 1, wantErr: askedTooLong},
		{name: "401 stops", op: "show", errs: []error{apiErr(401, ""), nil}, wantSends: 1, wantErr: provider.ErrAuth},
		{name: "403 stops", op: "show", errs: []error{apiErr(403, "not_authorized"), nil}, wantSends: 1, wantErr: provider.ErrAuth},
		{name: "auth slug on a 404 stops", op: "show", errs: []error{apiErr(404, "auth_error"), nil}, wantSends: 1, wantErr: provider.ErrAuth},
		{name: "not found stops", op: "show", errs: []error{apiErr(404, "no_such_instance"), nil}, wantSends: 1, wantErr: provider.ErrNotFound},
		{name: "other 4xx stops", op: "show", errs: []error{apiErr(400, "invalid_args"), nil}, wantSends: 1, wantErr: apiErr(400, "invalid_args")},
		{name: "an error that says Permanent stops", op: "destroy", errs: []error{fmt.Errorf("wrapped: %w", fenced{}), nil},
			wantSends: 1, wantErr: fenced{}},
		{name: "an unclassified error is not retried", op: "show", errs: []error{errors.New("decode response: unexpected EOF"), nil}, wantSends: 1, wantErr: errors.New("any")},
		{name: "tries are bounded", op: "show", errs: []error{apiErr(503, "")}, policy: retry.Policy{MaxTries: 3},
			wantSends: 3, wantErr: apiErr(503, ""), wantWaits: []time.Duration{500 * ms, s}},
		{name: "429s get twice the tries", op: "show", errs: []error{limited}, policy: retry.Policy{MaxTries: 2, Max: s},
			wantSends: 4, wantErr: provider.ErrRateLimited, wantWaits: []time.Duration{s, 2 * s, 2 * s}},
		{name: "elapsed time is bounded", op: "show", errs: []error{apiErr(503, "")}, policy: retry.Policy{MaxTries: 100, MaxElapsed: 10 * s, Max: 4 * s},
			wantSends: 6, wantErr: apiErr(503, ""), wantWaits: []time.Duration{500 * ms, s, 2 * s, 4 * s, 2500 * ms}},
		{name: "an incomplete listing is read again", op: "list", errs: []error{incomplete, nil}, wantSends: 2, wantWaits: []time.Duration{500 * ms}},
		{name: "destroy is retried on transport", op: "destroy", errs: []error{transport, nil}, wantSends: 2, wantWaits: []time.Duration{500 * ms}},
		{name: "an ambiguous create is not sent again", op: "create", errs: []error{unknown, nil}, wantSends: 1, wantErr: provider.ErrOutcomeUnknown},
		{name: "a create answered 5xx is not sent again", op: "create", errs: []error{apiErr(502, ""), nil}, wantSends: 1, wantErr: apiErr(502, "")},
		{name: "a create that did not reach the API is not sent again", op: "create", errs: []error{transport, nil}, wantSends: 1, wantErr: provider.ErrTransport},
		{name: "a create refused by the rate limiter is sent again", op: "create", errs: []error{limited, nil}, wantSends: 2, wantWaits: []time.Duration{s}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			waits := new([]time.Duration)
			clk := waitClock{f: clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), waits: waits}
			inner := &script{errs: tt.errs}
			var reports []string
			retries := -1
			p := tt.policy
			p.Clock = clk
			p.Jitter = func() float64 { return 0.5 } // the ±20% spread, centred: no spread
			p.Report = func(op string, err error, wait time.Duration) {
				reports = append(reports, fmt.Sprintf("%s after %v: wait %v", op, err, wait))
			}
			p.Success = func(op string, n int) { retries = n }
			c := retry.Wrap(inner, p)
			ctx := context.Background()
			var err error
			switch tt.op {
			case "show":
				_, err = c.ShowInstance(ctx, 9)
			case "list":
				_, err = c.ListInstances(ctx, provider.ListOptions{})
			case "destroy":
				err = c.DestroyInstance(ctx, 9)
			case "create":
				_, err = c.CreateInstance(ctx, provider.CreateRequest{OfferID: 3, Label: "vastrun-x"})
			}
			if inner.sends != tt.wantSends {
				t.Errorf("sent %d times, want %d", inner.sends, tt.wantSends)
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("err %v, want success", err)
			case tt.wantErr != nil && err == nil:
				t.Errorf("succeeded, want %v", tt.wantErr)
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) && !sameAPIError(err, tt.wantErr) && tt.wantErr.Error() != "any" {
					t.Errorf("err %v, want %v", err, tt.wantErr)
				}
			}
			if fmt.Sprint(*waits) != fmt.Sprint(tt.wantWaits) {
				t.Errorf("waits %v, want %v", *waits, tt.wantWaits)
			}
			if len(reports) != len(tt.wantWaits) {
				t.Errorf("retries reported %d times, want %d: %v", len(reports), len(tt.wantWaits), reports)
			}
			if err == nil && tt.wantSends > 1 && retries != tt.wantSends-1 {
				t.Errorf("success hook told of %d retries, want %d", retries, tt.wantSends-1)
			}
			if err != nil && inner.sends > 1 && !strings.Contains(err.Error(), fmt.Sprintf("sent %d times", inner.sends)) {
				t.Errorf("err %q does not say how often it was sent", err)
			}
		})
	}
}

// sameAPIError compares by status and slug: the table's *APIError values
// are not the ones returned.
func sameAPIError(got, want error) bool {
	var g, w *provider.APIError
	return errors.As(got, &g) && errors.As(want, &w) && g.Status == w.Status && g.Code == w.Code
}

func TestContextEndsTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waits := new([]time.Duration)
	clk := waitClock{f: clock.NewFake(time.Unix(0, 0)), waits: waits, onWait: cancel}
	inner := &script{errs: []error{apiErr(503, "")}}
	_, err := retry.Wrap(inner, retry.Policy{Clock: clk}).ShowInstance(ctx, 9)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "HTTP 503") || !strings.Contains(err.Error(), "show instance 9") {
		t.Fatalf("err %v, want context.Canceled naming the operation and the last failure", err)
	}
	if inner.sends != 1 || len(*waits) != 1 {
		t.Fatalf("sends %d, waits %v: the context should end the first wait", inner.sends, *waits)
	}

	// A call with a context already done sends nothing.
	inner = &script{errs: []error{nil}}
	if err := retry.Wrap(inner, retry.Policy{Clock: clk}).DestroyInstance(ctx, 9); !errors.Is(err, context.Canceled) || inner.sends != 0 {
		t.Fatalf("done context: err %v, %d sends", err, inner.sends)
	}
}

func TestRetryableClasses(t *testing.T) {
	for _, tc := range []struct {
		err              error
		idempotent, once bool // Retryable for a safe op, for a once op
	}{
		{apiErr(502, ""), true, false},
		{apiErr(429, ""), true, true},
		{&provider.TransportError{Op: "x", Err: context.DeadlineExceeded}, true, false}, // an HTTP client timeout
		{fmt.Errorf("%w", provider.ErrIncompleteListing), true, false},
		{apiErr(401, ""), false, false},
		{fmt.Errorf("%w (%w)", provider.ErrIncompleteListing, apiErr(403, "")), false, false},
		{&provider.OutcomeUnknownError{Err: apiErr(429, "")}, false, false},
		{fmt.Errorf("bid: %w", provider.ErrInvalidRequest), false, false},
		{fenced{}, false, false},
		{context.Canceled, false, false},
		{nil, false, false},
	} {
		if got := retry.Retryable(tc.err, true); got != tc.idempotent {
			t.Errorf("Retryable(%v, idempotent) = %v", tc.err, got)
		}
		if got := retry.Retryable(tc.err, false); got != tc.once {
			t.Errorf("Retryable(%v, not idempotent) = %v", tc.err, got)
		}
	}
}
