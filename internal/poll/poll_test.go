package poll_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
)

// autoClock advances a fake clock as soon as a wait starts, and records
// every wait.
type autoClock struct {
	f     *clock.Fake
	waits *[]time.Duration
}

func (a autoClock) Now() time.Time { return a.f.Now() }
func (a autoClock) After(d time.Duration) <-chan time.Time {
	*a.waits = append(*a.waits, d)
	ch := a.f.After(d)
	a.f.Advance(d)
	return ch
}

func newClock() autoClock {
	return autoClock{f: clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), waits: new([]time.Duration)}
}

func TestUntil(t *testing.T) {
	errFlaky := errors.New("connection reset")
	rate := fmt.Errorf("search: %w", provider.ErrRateLimited)
	auth := fmt.Errorf("show: %w", provider.ErrAuth)
	fenced := fmt.Errorf("destroy: %w", permanentErr{})
	asked := fmt.Errorf("list: %w", &provider.APIError{Op: "list instances", Status: 503, RetryAfter: 7 * time.Second})
	tests := []struct {
		name      string
		results   []error // per call; nil then done
		policy    poll.Policy
		wantErr   error
		wantWaits []time.Duration
	}{
		{name: "done at once", results: []error{nil}, wantWaits: nil},
		{name: "grows to max", results: []error{errFlaky, errFlaky, errFlaky, errFlaky, nil},
			policy:    poll.Policy{Initial: time.Second, Max: 3 * time.Second},
			wantWaits: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}},
		{name: "429 doubles the interval", results: []error{rate, rate, nil},
			policy:    poll.Policy{Initial: time.Second, Max: 10 * time.Second, Factor: 1},
			wantWaits: []time.Duration{2 * time.Second, 4 * time.Second}},
		{name: "limit caps the wait", results: []error{errFlaky, errFlaky, errFlaky, nil},
			policy:    poll.Policy{Initial: 4 * time.Second, Max: 10 * time.Second, Limit: func() time.Duration { return 5 * time.Second }},
			wantWaits: []time.Duration{4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{name: "Retry-After sets the least wait", results: []error{asked, errFlaky, nil},
			policy:    poll.Policy{Initial: time.Second, Max: 10 * time.Second},
			wantWaits: []time.Duration{7 * time.Second, 2 * time.Second}},
		{name: "Retry-After is clipped to the deadline", results: []error{asked, nil},
			policy:    poll.Policy{Initial: time.Second, Deadline: time.Date(2026, 12, 1, 0, 0, 3, 0, time.UTC)},
			wantWaits: []time.Duration{3 * time.Second}},
		{name: "auth stops", results: []error{auth, nil}, wantErr: provider.ErrAuth, wantWaits: nil},
		{name: "an error that says it is permanent stops", results: []error{fenced, nil}, wantErr: permanentErr{}, wantWaits: nil},
		{name: "deadline ends with the last error", results: []error{errFlaky, errFlaky, errFlaky, errFlaky, errFlaky},
			policy:  poll.Policy{Initial: 4 * time.Second, Max: 4 * time.Second, Deadline: time.Date(2026, 12, 1, 0, 0, 10, 0, time.UTC)},
			wantErr: errFlaky, wantWaits: []time.Duration{4 * time.Second, 4 * time.Second, 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			calls := 0
			err := poll.Until(context.Background(), clk, tt.policy, func(context.Context) (bool, error) {
				r := tt.results[calls]
				calls++
				return r == nil, r
			})
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if tt.name == "deadline ends with the last error" && !errors.Is(err, poll.ErrDeadline) {
				t.Fatalf("err %v does not wrap ErrDeadline", err)
			}
			if fmt.Sprint(*clk.waits) != fmt.Sprint(tt.wantWaits) {
				t.Fatalf("waits %v, want %v", *clk.waits, tt.wantWaits)
			}
		})
	}
}

func TestUntilContextEndsTheWait(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- poll.Until(ctx, f, poll.Policy{}, func(context.Context) (bool, error) {
			return false, errors.New("not yet")
		})
	}()
	cancel() // the fake clock never moves: only the context can end it
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// permanentErr says of itself that retrying cannot help (as a controller
// that lost its lease does).
type permanentErr struct{}

func (permanentErr) Error() string   { return "lease lost" }
func (permanentErr) Permanent() bool { return true }
