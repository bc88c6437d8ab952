package policy

import (
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

func TestBidAndMaxBid(t *testing.T) {
	o := provider.Offer{ID: 1, GPUName: "RTX 4090", NumGPUs: 1, DPHBase: 0.4, MinBid: 0.2, StorageCostMonth: 0.72, Verification: "verified", Reliability: 0.99}
	p := Policy{Count: 1, DiskGB: 10, Interruptible: true, BidMargin: 0.1, MaxBid: 1}
	if b := p.Bid(o); b != 0.22 {
		t.Errorf("bid = %v, want min_bid + 10%% = 0.22", b)
	}
	if got := p.Price(o); got != 0.23 {
		t.Errorf("price = %v, want bid 0.22 + storage 0.01", got)
	}
	p.MaxBid = 0.225 // room for 0.215 after storage: the bid is capped, not refused
	if b := p.Bid(o); b != 0.215 {
		t.Errorf("capped bid = %v, want 0.215", b)
	}
	chosen, _ := Select(p, []provider.Offer{o})
	if chosen == nil {
		t.Fatalf("an offer whose min_bid fits the ceiling was refused")
	}
	p.MaxBid = 0.205 // under min_bid + storage
	if chosen, ds := Select(p, []provider.Offer{o}); chosen != nil || len(ds[0].Reasons) == 0 {
		t.Fatalf("an offer whose min_bid + storage passes max_bid was chosen: %+v", ds)
	}
	if st := Funnel(p, []provider.Offer{o}); st[len(st)-1].Left != 0 || !strings.HasPrefix(RemovedBy(st), "gpu.max_bid 0.205") {
		t.Errorf("funnel: %+v removed by %q", st, RemovedBy(st))
	}
	if (Policy{DiskGB: 10}).Bid(o) != 0 {
		t.Errorf("an on-demand policy bids")
	}
}
