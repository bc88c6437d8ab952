package retry_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

type autoClock struct{ f *clock.Fake }

func (a autoClock) Now() time.Time { return a.f.Now() }
func (a autoClock) After(d time.Duration) <-chan time.Time {
	ch := a.f.After(d)
	a.f.Advance(d)
	return ch
}

// setup returns the simulator and a real client (one send per call) behind
// the engine-shaped decorator, so every retry seen is the decorator's.
func setup(t *testing.T) (*sim.Server, *retry.Market, *[]string) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s, err := sim.New(sim.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	c, err := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: autoClock{clk}})
	if err != nil {
		t.Fatal(err)
	}
	var reports []string
	m := &retry.Market{Inner: c, Clock: autoClock{clk}, MaxTries: 4,
		Report: func(op string, err error, _ time.Duration) { reports = append(reports, op) }}
	return s, m, &reports
}

func TestRetriesTransientFailures(t *testing.T) {
	s, m, reports := setup(t)
	ctx := context.Background()
	s.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "list", Count: 2, Status: 503})
	if _, err := m.ListInstances(ctx, provider.ListOptions{}); err != nil {
		t.Fatalf("list after two 503s: %v", err)
	}
	if len(*reports) != 2 {
		t.Fatalf("retries reported: %v", *reports)
	}
	s.Inject(sim.Fault{Kind: sim.FaultRateLimit, Endpoint: "search", Count: 3})
	if _, err := m.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}}); err != nil {
		t.Fatalf("search after three 429s: %v", err)
	}
}

func TestGivesUpAfterMaxTries(t *testing.T) {
	s, m, _ := setup(t)
	s.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "list", Count: 10, Status: 502})
	_, err := m.ListInstances(context.Background(), provider.ListOptions{})
	var ae *provider.APIError
	if err == nil || !errors.As(err, &ae) || ae.Status != 502 {
		t.Fatalf("after the tries are spent: %v", err)
	}
}

func TestPermanentErrorsAreNotRetried(t *testing.T) {
	_, m, reports := setup(t)
	ctx := context.Background()
	if _, err := m.ShowInstance(ctx, 424242); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("show of a missing instance: %v", err)
	}
	if len(*reports) != 0 {
		t.Fatalf("a permanent error was retried: %v", *reports)
	}
}

func TestCreateIsNeverRetried(t *testing.T) {
	s, m, reports := setup(t)
	ctx := context.Background()
	offers, err := m.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}})
	if err != nil || len(offers) == 0 {
		t.Fatal(err)
	}
	s.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "create", Count: 1, Status: 503})
	if _, err := m.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "retry-test"}); err == nil {
		t.Fatal("a failed create was retried into a success")
	}
	if len(*reports) != 0 || len(s.Snapshot().Live) != 0 {
		t.Fatalf("create retried: %v, live %d", *reports, len(s.Snapshot().Live))
	}
}

func TestCancelledContextDoesNothing(t *testing.T) {
	s, m, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "list", Count: 1, Status: 503})
	if _, err := m.ListInstances(ctx, provider.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	// The pending fault is still there: the call never reached the server.
	if _, err := m.Inner.ListInstances(context.Background(), provider.ListOptions{}); err == nil {
		t.Fatal("the cancelled call reached the server")
	}
}
