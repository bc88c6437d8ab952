package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
)

// A 429 storm on one endpoint is paid from one budget by every call to
// it: once spent, a 429 ends the next call at once; other endpoints keep
// theirs, and the budget comes back with time.
func TestRateBudgetIsPerEndpointAcrossCalls(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	waits := new([]time.Duration)
	clk := waitClock{f: fake, waits: waits}
	limited := &provider.APIError{Op: "show instance 9", Status: 429, Msg: "API requests too frequent"} // plain text, no Retry-After
	s := &script{errs: []error{limited}}
	var storm []int
	c := retry.Wrap(s, retry.Policy{Clock: clk, Jitter: func() float64 { return 0.5 }, MaxTries: 5,
		Budget: retry.NewRateBudget(clk, 3, time.Hour), Throttled: func(ep string, spent int) {
			if ep == "show instance" {
				storm = append(storm, spent)
			}
		}})
	ctx := context.Background()
	_, err := c.ShowInstance(ctx, 9)
	if !errors.Is(err, provider.ErrRateLimited) || !strings.Contains(err.Error(), `budget of "show instance" is spent`) || s.sends != 4 {
		t.Fatalf("first call: %d sends, %v; want 4 (3 retries from the budget), then the budget named", s.sends, err)
	}
	s.sends = 0
	if _, err := c.ShowInstance(ctx, 10); !errors.Is(err, provider.ErrRateLimited) || s.sends != 1 {
		t.Fatalf("second call on the spent endpoint: %d sends, %v; want 1", s.sends, err)
	}
	if len(storm) != 3 || storm[2] != 3 {
		t.Errorf("throttle reports %v, want 1, 2, 3", storm)
	}
	// Another endpoint has its own budget.
	s.sends = 0
	if err := c.DestroyInstance(ctx, 9); !errors.Is(err, provider.ErrRateLimited) || s.sends != 4 {
		t.Errorf("destroy: %d sends, %v; want 4 from its own budget", s.sends, err)
	}
	// Refilled after three refill periods, the storm count starts again.
	fake.Advance(3 * time.Hour)
	s.sends, s.errs = 0, []error{limited, nil}
	if _, err := c.ShowInstance(ctx, 9); err != nil || s.sends != 2 {
		t.Errorf("after the refill: %d sends, %v; want success on the second", s.sends, err)
	}
	if storm[len(storm)-1] != 1 {
		t.Errorf("a new storm counts from 1: %v", storm)
	}
}

func TestEndpointDropsWhatVaries(t *testing.T) {
	for op, want := range map[string]string{
		"show instance 30511001":             "show instance",
		"list instances labelled vastrun-x":  "list instances",
		"change bid of instance 7":           "change bid of instance",
		"copy 1:/workspace/a to 2:/root/b":   "copy",
		"destroy instances [1 2]":            "destroy instances",
		"search offers":                      "search offers",
		"create instance from offer 2480031": "create instance from offer",
	} {
		if got := retry.Endpoint(op); got != want {
			t.Errorf("Endpoint(%q) = %q, want %q", op, got, want)
		}
	}
}
