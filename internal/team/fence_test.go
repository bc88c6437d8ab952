package team_test

import (
	"context"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/team"
)

// market is a provider.Market whose calls are only counted; bidMarket adds the
// change-bid route.
type market struct {
	provider.Market
	bids int
}

type bidMarket struct{ *market }

func (m bidMarket) ChangeBid(context.Context, provider.InstanceID, float64) error {
	m.bids++
	return nil
}

// The fence offers ChangeBid exactly when the market it wraps does (the
// training workflow finds the route by type assertion), and fences it like
// every other mutating call: with no lease held it changes nothing.
func TestFenceKeepsTheChangeBidRoute(t *testing.T) {
	c := &team.Controller{} // holds no lease
	if _, ok := c.Fence(&market{}).(provider.BidChanger); ok {
		t.Fatal("a fenced market without a change-bid route offers one")
	}
	inner := bidMarket{&market{}}
	fenced, ok := c.Fence(inner).(provider.BidChanger)
	if !ok {
		t.Fatal("the fence hides the change-bid route: re-bidding would be off under team state")
	}
	if err := fenced.ChangeBid(context.Background(), 7, 0.5); err == nil {
		t.Fatal("a bid change without the run's lease was let through")
	}
	if inner.bids != 0 {
		t.Fatalf("the marketplace saw %d bid changes from an unfenced controller", inner.bids)
	}
}

type priceMarket struct{ *market }

func (m priceMarket) PendingPriceIncreases(context.Context) ([]provider.PriceIncrease, error) {
	return nil, nil
}
func (m priceMarket) AcceptPriceIncrease(context.Context, int64) error { m.bids++; return nil }
func (m priceMarket) RejectPriceIncrease(context.Context, int64) error { m.bids++; return nil }

type bidPriceMarket struct{ priceMarket }

func (m bidPriceMarket) ChangeBid(context.Context, provider.InstanceID, float64) error {
	m.bids++
	return nil
}

// The fence offers the price-increase routes exactly when the market it
// wraps does, beside ChangeBid or alone, and fences the answers.
func TestFenceKeepsThePriceIncreaseRoutes(t *testing.T) {
	c := &team.Controller{} // holds no lease
	if _, ok := c.Fence(&market{}).(provider.PriceIncreases); ok {
		t.Fatal("a fenced market without price-increase routes offers them")
	}
	inner := &market{}
	for _, m := range []provider.Market{priceMarket{inner}, bidPriceMarket{priceMarket{inner}}} {
		fenced, ok := c.Fence(m).(provider.PriceIncreases)
		if !ok {
			t.Fatalf("the fence hides the price-increase routes of %T: the run could not answer a host's increase", m)
		}
		if _, isBid := m.(provider.BidChanger); isBid {
			if _, ok := c.Fence(m).(provider.BidChanger); !ok {
				t.Fatalf("the fence drops ChangeBid beside the price routes")
			}
		}
		if _, err := fenced.PendingPriceIncreases(context.Background()); err != nil {
			t.Fatalf("the list is a read and passes: %v", err)
		}
		if fenced.AcceptPriceIncrease(context.Background(), 1) == nil || fenced.RejectPriceIncrease(context.Background(), 1) == nil {
			t.Fatal("an answer without the run's lease was let through")
		}
	}
	if inner.bids != 0 {
		t.Fatalf("the marketplace saw %d answers from an unfenced controller", inner.bids)
	}
}
