package vast

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

// A bid always goes out with price and cancel_unavail true; an on-demand
// create sends price null.
func TestBidCreateSendsPriceAndCancelUnavail(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("PUT /api/v0/asks/3/", ok(`{"success":true,"new_contract":9}`))
	ctx := context.Background()
	if _, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: 3, Image: "i", Label: "l", BidPrice: 0.12345}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: 3, Image: "i", Label: "l"}); err != nil {
		t.Fatal(err)
	}
	var bid, onDemand map[string]any
	json.Unmarshal([]byte(s.bodies[0]), &bid)
	json.Unmarshal([]byte(s.bodies[1]), &onDemand)
	if bid["price"] != 0.124 || bid["cancel_unavail"] != true {
		t.Errorf("bid body: price %v, cancel_unavail %v; want 0.124 (rounded up) and true", bid["price"], bid["cancel_unavail"])
	}
	if p, ok := onDemand["price"]; !ok || p != nil {
		t.Errorf("on-demand body: price %v (present %v), want null", p, ok)
	}
	if _, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: 3, Image: "i", Label: "l", BidPrice: 200}); !errors.Is(err, provider.ErrInvalidRequest) {
		t.Errorf("a bid over 128 $/h: %v, want ErrInvalidRequest before sending", err)
	}
}

// The instance read-back says whether a bid was rented and at what price.
func TestInstanceReadsBidBack(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("GET /api/v0/instances/5/", ok(`{"instances":{"id":5,"is_bid":true,"min_bid":0.11,"dph_base":0.3,"dph_total":0.1341667,"storage_total_cost":0.0041667}}`))
	s.on("GET /api/v0/instances/6/", ok(`{"instances":{"id":6,"is_bid":false,"min_bid":0.11,"dph_base":0.3,"dph_total":0.3041667,"storage_total_cost":0.0041667}}`))
	ctx := context.Background()
	in, err := c.ShowInstance(ctx, 5)
	if err != nil || !in.IsBid || in.BidDPH != 0.13 || in.MinBid != 0.11 {
		t.Fatalf("bid instance: %+v %v", in, err)
	}
	if in, _ := c.ShowInstance(ctx, 6); in.IsBid || in.BidDPH != 0 {
		t.Fatalf("on-demand instance: %+v", in)
	}
}

// Change bid speaks {"client_id": "me", "price": …} on the documented route.
func TestChangeBidBody(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("PUT /api/v0/instances/bid_price/7/", ok(`{"success":true}`), status(404, `{"success":false,"error":"no_such_instance","msg":"Instance 7 not found."}`))
	ctx := context.Background()
	if err := c.ChangeBid(ctx, 7, 0.2); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.Unmarshal([]byte(s.bodies[0]), &body)
	if body["client_id"] != "me" || body["price"] != 0.2 || len(body) != 2 {
		t.Errorf("change-bid body %v", body)
	}
	if err := c.ChangeBid(ctx, 7, 0.2); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("change bid of a gone instance: %v, want ErrNotFound", err)
	}
}
