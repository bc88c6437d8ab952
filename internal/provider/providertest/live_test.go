package providertest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// TestLiveAPI runs the suite against console.vast.ai. It rents the cheapest
// verified offer for a few minutes and destroys it. Opt in with
// VASTRUN_LIVE_API_KEY (and optionally VAST_URL).
func TestLiveAPI(t *testing.T) {
	key := os.Getenv("VASTRUN_LIVE_API_KEY")
	if key == "" {
		t.Skip("set VASTRUN_LIVE_API_KEY to run the conformance suite against the live Vast API (it rents the cheapest offer for minutes)")
	}
	base := os.Getenv("VAST_URL")
	// Wrapped as vastrun wraps it: the live API rate-limits.
	mk := func(k string) *retry.Client {
		c, err := vast.New(vast.Options{BaseURL: base, APIKey: k, UserAgent: "vastrun-conformance"})
		if err != nil {
			t.Fatal(err)
		}
		return retry.Wrap(c, retry.Policy{})
	}
	q, err := vast.ParseQuery("num_gpus=1 reliability>0.98 direct_port_count>=1", vast.QueryOptions{Order: "dph_total", StorageGB: 10, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	Run(t, func(t *testing.T) Harness {
		market := mk(key)
		return Harness{
			Market: market, Ops: market, BadKey: mk("0000000000000000000000000000000000000000000000000000000000000000"), NoKey: mk(""),
			Sleep: func(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, clock.Real{}, d) },
			Image: "vastai/base-image:@vastai-automatic-tag", Query: q, Live: true, ReadyTimeout: 15 * time.Minute,
		}
	})
}
