package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/provider"
)

type offerList []provider.Offer

func (l offerList) SearchOffers(_ context.Context, q provider.Query) ([]provider.Offer, error) {
	if q["type"] != "bid" {
		return nil, errors.New("an interruptible policy must search type bid")
	}
	return l, nil
}

func TestMaxBidUnderMinBidIsRefused(t *testing.T) {
	offers := offerList{{ID: 1, GPUName: "RTX 4090", NumGPUs: 1, DPHBase: 0.4, MinBid: 0.2, StorageCostMonth: 0.72, Verification: "verified", Reliability: 0.99, Rentable: true}}
	cfg := func(maxBid string) *config.Config {
		c, err := config.Parse([]byte(`
image: ghcr.io/acme/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
budget: {max_spend: 5}
gpu: {interruptible: true, disk_gb: 10, max_bid: ` + maxBid + `}
train: {command: x, checkpoint_uri: "file:///tmp/x"}
`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	_, err := Market(context.Background(), offers, cfg("0.15"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Problems[0].Field != "gpu.max_bid" || !strings.Contains(pe.Problems[0].What, "$0.2100/h") || !strings.Contains(pe.Problems[0].Fix, "at least 0.210") {
		t.Fatalf("max_bid under min_bid + storage: %v", err)
	}
	rep, err := Market(context.Background(), offers, cfg("0.5"))
	if err != nil || rep.Matching != 1 || rep.Cheapest != 0.23 {
		t.Fatalf("max_bid over the bid: %+v %v", rep, err)
	}
}
