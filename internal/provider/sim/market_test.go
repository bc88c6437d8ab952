package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// minBids is offer id's min_bid as bid searches show it, read every step
// of the simulator's clock n times.
func minBids(t *testing.T, e *env, id provider.OfferID, step time.Duration, n int) []float64 {
	t.Helper()
	var out []float64
	for range n {
		offers, err := e.client.SearchOffers(context.Background(), provider.Query{"type": "bid", "id": map[string]any{"eq": int64(id)}})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range offers {
			if o.ID == id {
				out, found = append(out, o.MinBid), true
			}
		}
		if !found {
			t.Fatalf("offer %d not in the search", id)
		}
		e.clk.Advance(step)
	}
	return out
}

func firstOffer(t *testing.T, e *env) provider.Offer {
	t.Helper()
	offers, err := e.client.SearchOffers(context.Background(), provider.Query{"type": "bid", "num_gpus": map[string]any{"eq": 1}, "rentable": map[string]any{"eq": true}, "order": [][]string{{"dph_total", "asc"}}, "limit": 1})
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	return offers[0]
}

// One seed is one market; another seed another; a still market is still.
func TestMarketIsSeededAndMoves(t *testing.T) {
	a := newEnv(t, sim.Config{DisableSSH: true, Market: sim.DefaultMarket, Seed: 3})
	b := newEnv(t, sim.Config{DisableSSH: true, Market: sim.DefaultMarket, Seed: 3})
	c := newEnv(t, sim.Config{DisableSSH: true, Market: sim.DefaultMarket, Seed: 4})
	still := newEnv(t, sim.Config{DisableSSH: true, Seed: 3})
	id := firstOffer(t, a).ID
	sa, sb := minBids(t, a, id, 5*time.Minute, 60), minBids(t, b, id, 5*time.Minute, 60)
	sc := minBids(t, c, firstOffer(t, c).ID, 5*time.Minute, 60)
	ss := minBids(t, still, id, 5*time.Minute, 60)
	moves := 0
	for i := range sa {
		if sa[i] != sb[i] {
			t.Fatalf("step %d: the same seed gave %v and %v", i, sa[i], sb[i])
		}
		if i > 0 && sa[i] != sa[i-1] {
			moves++
		}
		if ss[i] != ss[0] {
			t.Fatalf("a still market moved: %v", ss)
		}
	}
	if moves < 30 {
		t.Errorf("min_bid moved %d times in 60 steps: %v", moves, sa)
	}
	same := true
	for i := range sa {
		same = same && sa[i] == sc[i]
	}
	if same {
		t.Errorf("seeds 3 and 4 gave the same market")
	}
}

// A bid at exactly min_bid is outbid as soon as the market rises, billed
// at its bid while it runs and for storage alone while stopped; raising it
// over the market resumes it.
func TestMarketOutbidsAndChangeBidResumes(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true, Market: sim.MarketConfig{Step: time.Minute, Volatility: 0.1}})
	ctx := context.Background()
	o := firstOffer(t, e)
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: o.ID, Image: "img", DiskGB: 10, Label: "walk", BidPrice: o.MinBid})
	if err != nil {
		t.Fatal(err)
	}
	defer e.client.DestroyInstance(ctx, res.InstanceID)
	var inst provider.Instance
	for i := 0; i < 600; i++ {
		e.clk.Advance(time.Minute)
		if inst, err = e.client.ShowInstance(ctx, res.InstanceID); err != nil {
			t.Fatal(err)
		}
		if inst.Paused() {
			break
		}
	}
	if !inst.Paused() || inst.MinBid <= o.MinBid {
		t.Fatalf("a bid at min_bid never outbid in 10 h of a 10%% market: %+v", inst)
	}
	// Hold it outbid (the walk could come back down) while billing is read.
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultOutbid, Instance: int64(res.InstanceID), Price: 32, For: 1800}); err != nil {
		t.Fatal(err)
	}
	st := snapshotOf(t, e, res.InstanceID)
	e.clk.Advance(30 * time.Minute)
	st2 := snapshotOf(t, e, res.InstanceID)
	if st2.GPUCost != st.GPUCost || st2.DiskCost <= st.DiskCost {
		t.Errorf("while outbid: gpu %v → %v, disk %v → %v", st.GPUCost, st2.GPUCost, st.DiskCost, st2.DiskCost)
	}
	raised := provider.RoundBid(o.MinBid * 4) // over anything the 10% walk reaches in an hour
	if err := e.client.ChangeBid(ctx, res.InstanceID, raised); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	if inst, _ = e.client.ShowInstance(ctx, res.InstanceID); !inst.Running() || math.Abs(inst.BidDPH-raised) > 1e-6 {
		t.Fatalf("after raising the bid to %v: %+v", raised, inst)
	}
	before := snapshotOf(t, e, res.InstanceID)
	e.clk.Advance(time.Hour)
	after := snapshotOf(t, e, res.InstanceID)
	if got := after.GPUCost - before.GPUCost; after.ActualStatus == "running" && math.Abs(got-raised) > 1e-6 {
		t.Errorf("an hour running at a bid of $%v/h billed $%v", raised, got)
	}
}

func snapshotOf(t *testing.T, e *env, id provider.InstanceID) sim.InstanceState {
	t.Helper()
	for _, in := range e.sim.Snapshot().Live {
		if in.ID == int64(id) {
			return in
		}
	}
	t.Fatalf("instance %d not live", id)
	return sim.InstanceState{}
}

// outbid after N s acts at that instant; market_spike raises min_bid in
// search for its duration.
func TestOutbidAfterAndMarketSpike(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	o := firstOffer(t, e)
	bid := provider.RoundBid(o.MinBid * 1.1)
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: o.ID, Image: "img", DiskGB: 10, Label: "after", BidPrice: bid})
	if err != nil {
		t.Fatal(err)
	}
	defer e.client.DestroyInstance(ctx, res.InstanceID)
	e.clk.Advance(time.Minute)
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultOutbid, Instance: int64(res.InstanceID), Seconds: 30, For: 60}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(29 * time.Second)
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Running() {
		t.Fatalf("outbid before its time: %+v", inst)
	}
	e.clk.Advance(2 * time.Second)
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Paused() {
		t.Fatalf("not outbid 31 s after an outbid at 30 s: %+v", inst)
	}
	e.clk.Advance(2 * time.Minute) // the competing bid ends; the instance comes back
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Running() {
		t.Fatalf("not resumed once the competing bid ended: %+v", inst)
	}
	if got := snapshotOf(t, e, res.InstanceID).Outbids; got != 1 {
		t.Errorf("outbids = %d, want 1", got)
	}

	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultMarketSpike, Factor: 3, For: 600}); err != nil {
		t.Fatal(err)
	}
	spiked := minBids(t, e, o.ID, time.Minute, 1)[0]
	if math.Abs(spiked-o.MinBid*3) > 1e-3 {
		t.Errorf("min_bid during a 3x spike: %v, want %v", spiked, o.MinBid*3)
	}
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Paused() {
		t.Errorf("a bid at min_bid+10%% survived a 3x spike: %+v", inst)
	}
	e.clk.Advance(10 * time.Minute)
	if after := minBids(t, e, o.ID, time.Minute, 1)[0]; after != o.MinBid {
		t.Errorf("min_bid after the spike: %v, want %v", after, o.MinBid)
	}
}

// outbid with count arms itself on the next interruptible rentals, Seconds
// after each first runs.
func TestOutbidArmedForNextRentals(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultOutbid, Count: 1, Seconds: 60, For: 60}); err != nil {
		t.Fatal(err)
	}
	o := firstOffer(t, e)
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: o.ID, Image: "img", DiskGB: 10, Label: "armed", BidPrice: provider.RoundBid(o.MinBid * 1.1)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.client.DestroyInstance(ctx, res.InstanceID)
	e.clk.Advance(65 * time.Second) // running at 10 s
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Running() {
		t.Fatalf("outbid before 60 s of running: %+v", inst)
	}
	e.clk.Advance(10 * time.Second)
	if st := snapshotOf(t, e, res.InstanceID); st.DiskCost <= 0 || math.Abs(st.GPUCost-st.Bid*60/3600) > 1e-9 {
		t.Errorf("billed %v for the GPU, want exactly 60 s at the bid %v", st.GPUCost, st.Bid)
	}
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Paused() {
		t.Fatalf("not outbid 60 s after running: %+v", inst)
	}
	e.clk.Advance(2 * time.Minute)
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); !inst.Running() {
		t.Fatalf("not back after the competing bid's 60 s: %+v", inst)
	}
}
