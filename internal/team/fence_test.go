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
