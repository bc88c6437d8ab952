package sim_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/openapitest"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// At any speed, what the simulator reports never lies ahead of the wall
// clock, so durations and windows computed from the wall clock work.
func TestScaledTimeIsReportedAsWallTime(t *testing.T) {
	const speed = 1000
	wallStart := time.Now()
	s, err := sim.New(sim.Config{Clock: clock.NewScaled(time.Now(), speed), DisableSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	c, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), HTTPClient: openapitest.New(t).Client()})
	ctx := context.Background()
	offers, err := c.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 1})
	if err != nil || len(offers) == 0 {
		t.Fatal(err)
	}
	res, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "wall"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DestroyInstance(ctx, res.InstanceID)
	// Every request takes real time, which is a thousand times as much
	// simulated time: a few of them put the simulator's clock well ahead.
	for i := 0; i < 5; i++ {
		if _, err := c.ShowInstance(ctx, res.InstanceID); err != nil {
			t.Fatal(err)
		}
	}
	inst, err := c.ShowInstance(ctx, res.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if simNow := s.Snapshot().Now; !simNow.After(now) {
		t.Fatalf("the scaled clock (%v) is not ahead of the wall clock (%v); the test proves nothing", simNow, now)
	}
	if inst.StartDate.Before(wallStart.Add(-time.Second)) || inst.StartDate.After(now) {
		t.Errorf("start_date %v is outside the wall-clock span of the test [%v, %v]", inst.StartDate, wallStart, now)
	}
	charges, err := c.Charges(ctx, provider.ChargeQuery{From: wallStart.Add(-time.Minute), To: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	now = time.Now() // the charges were billed up to their own request
	found := false
	for _, ch := range charges {
		if ch.InstanceID == res.InstanceID {
			found = true
			// End is an integer epoch rounded up: at most a second past now.
			if ch.End.After(now.Add(time.Second)) || ch.Start.Before(wallStart.Add(-time.Second)) {
				t.Errorf("charge window [%v, %v] is outside the wall-clock span of the test [%v, %v]", ch.Start, ch.End, wallStart, now)
			}
		}
	}
	if !found {
		t.Errorf("a wall-clock charges window around the test holds no charge for instance %d: %+v", res.InstanceID, charges)
	}
	logs, err := c.RequestLogs(ctx, res.InstanceID, provider.LogRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		stamp, _, _ := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339, stamp)
		if err != nil || at.After(time.Now()) {
			t.Errorf("log line stamped %q, after the wall clock: %q", stamp, line)
		}
	}
}
