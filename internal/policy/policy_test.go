package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

func offer(id int64, gpu string, n int, mods ...func(*provider.Offer)) provider.Offer {
	o := provider.Offer{ID: provider.OfferID(id), MachineID: id * 10, GPUName: gpu, NumGPUs: n, GPURAMMB: 24564,
		CUDAMax: 12.4, Reliability: 0.99, Verification: "verified", Geolocation: "Oregon, US", DiskSpaceGB: 500,
		DPHBase: 0.30, StorageCostMonth: 0.144, InetDownMbps: 1000}
	for _, m := range mods {
		m(&o)
	}
	return o
}

func TestSelectChoosesCheapestTotalAndExplainsEveryOffer(t *testing.T) {
	p := Policy{Models: []string{"RTX_4090"}, Count: 1, MinVRAMGB: 20, MinCUDA: 12.1, MinReliability: 0.98,
		Verified: true, AllowCountries: []string{"us", "CA"}, DiskGB: 50, MaxDPH: 0.40, ExcludeMachines: []int64{70}}
	offers := []provider.Offer{
		offer(1, "RTX 4090", 1, func(o *provider.Offer) { o.DPHBase = 0.33 }),                            // total 0.34
		offer(2, "RTX 4090", 1, func(o *provider.Offer) { o.DPHBase = 0.29; o.StorageCostMonth = 1.44 }), // storage 0.10 → 0.39
		offer(3, "RTX 3090", 1),
		offer(4, "RTX 4090", 2),
		offer(5, "RTX 4090", 1, func(o *provider.Offer) { o.CUDAMax = 11.8 }),
		offer(6, "RTX 4090", 1, func(o *provider.Offer) { o.Verification = "unverified"; o.Reliability = 0.9 }),
		offer(7, "RTX 4090", 1), // machine 70 excluded
		offer(8, "RTX 4090", 1, func(o *provider.Offer) { o.Geolocation = "Germany, DE" }),
		offer(9, "RTX 4090", 1, func(o *provider.Offer) { o.DPHBase = 0.39 }), // total 0.40 → at the ceiling: ok
		offer(10, "RTX 4090", 1, func(o *provider.Offer) { o.DPHBase = 0.395 }),
		offer(11, "RTX 4090", 1, func(o *provider.Offer) { o.DiskSpaceGB = 20 }),
	}
	chosen, ds := Select(p, offers)
	if chosen == nil || chosen.ID != 1 {
		t.Fatalf("chosen = %+v, want offer 1 (cheapest total, not cheapest GPU)", chosen)
	}
	if len(ds) != len(offers) {
		t.Fatalf("%d decisions for %d offers", len(ds), len(offers))
	}
	want := map[provider.OfferID]string{
		1: "chosen", 2: "more than the chosen", 9: "more than the chosen",
		3: `GPU "RTX 3090" is not one of RTX 4090`, 4: "has 2 GPUs", 5: "CUDA 11.8 < 12.1",
		6: "host is unverified", 7: "machine 70 already failed", 8: "country DE is not allowed",
		10: "over the ceiling", 11: "disk 20 GB < 50 GB",
	}
	for _, d := range ds {
		all := strings.Join(d.Reasons, "; ")
		if !strings.Contains(all, want[d.Offer.ID]) {
			t.Errorf("offer %d reasons %q lack %q", d.Offer.ID, all, want[d.Offer.ID])
		}
		if d.Offer.ID == 6 && len(d.Reasons) < 2 {
			t.Errorf("offer 6 should list every failed criterion: %q", all)
		}
	}
	if !ds[0].Chosen || !ds[0].Eligible || ds[1].Offer.ID != 9 && ds[1].Offer.ID != 2 {
		t.Errorf("decisions not ordered eligible-cheapest first: %v %v", ds[0].Offer.ID, ds[1].Offer.ID)
	}
}

func TestSelectNoneEligible(t *testing.T) {
	chosen, ds := Select(Policy{MaxDPH: 0.01}, []provider.Offer{offer(1, "RTX 4090", 1)})
	if chosen != nil || ds[0].Eligible || !strings.Contains(ds[0].Reasons[0], "ceiling") {
		t.Fatalf("%+v %+v", chosen, ds)
	}
}

func TestTiesGoToReliabilityThenID(t *testing.T) {
	a := offer(5, "RTX 4090", 1, func(o *provider.Offer) { o.Reliability = 0.991 })
	b := offer(3, "RTX 4090", 1, func(o *provider.Offer) { o.Reliability = 0.995 })
	c := offer(1, "RTX 4090", 1, func(o *provider.Offer) { o.Reliability = 0.995 })
	chosen, _ := Select(Policy{}, []provider.Offer{a, b, c})
	if chosen.ID != 1 {
		t.Fatalf("chosen %d", chosen.ID)
	}
}

func TestQueryCarriesEveryCriterion(t *testing.T) {
	q := Policy{Models: []string{"RTX_4090", "A100_SXM4"}, Count: 2, MinVRAMGB: 40, MinCUDA: 12.1, MinReliability: 0.98,
		Verified: true, Datacenter: true, AllowCountries: []string{"us"}, DiskGB: 30, MaxDPH: 2, MinInetDownMbps: 200}.Query(50)
	s := fmt.Sprint(q)
	for _, want := range []string{"RTX 4090", "A100 SXM4", "num_gpus:map[eq:2]", "gpu_ram:map[gte:40000]", "cuda_max_good:map[gte:12.1]",
		"reliability:map[gte:0.98]", "verified:map[eq:true]", "datacenter:map[eq:true]", "geolocation:map[in:[US]]",
		"allocated_storage:30", "dph_total:map[lte:2]", "inet_down:map[gte:200]", "limit:50", "disk_space:map[gte:30]"} {
		if !strings.Contains(s, want) {
			t.Errorf("query lacks %s: %s", want, s)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := (Policy{MinReliability: 1.5, AllowCountries: []string{"USA"}, MaxDPH: -1}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "min_reliability") || !strings.Contains(err.Error(), "USA") || !strings.Contains(err.Error(), "max_dph") {
		t.Fatalf("validate: %v", err)
	}
	if err := (Policy{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkSelect10k(b *testing.B) {
	offers := make([]provider.Offer, 10000)
	for i := range offers {
		offers[i] = offer(int64(i+1), []string{"RTX 4090", "RTX 3090", "A100 SXM4"}[i%3], 1+i%2, func(o *provider.Offer) {
			o.DPHBase = 0.2 + float64(i%997)/1000
			o.Reliability = 0.9 + float64(i%100)/1000
		})
	}
	p := Policy{Models: []string{"RTX 4090"}, MinReliability: 0.95, MaxDPH: 0.8, DiskGB: 20}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Select(p, offers)
	}
}

// An offer whose host leaves before the run's worst-case end is rejected
// with the end date in the reason; one that stays exactly long enough, or
// names no end, is not.
func TestHostThatLeavesBeforeTheRunEndsIsRejected(t *testing.T) {
	seen := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ends := func(d time.Duration) func(*provider.Offer) {
		return func(o *provider.Offer) { o.SeenAt, o.HostEnd = seen, seen.Add(d) }
	}
	p := Policy{Count: 1, MinHostTime: 2 * time.Hour}
	offers := []provider.Offer{
		offer(1, "RTX 4090", 1, ends(time.Hour), func(o *provider.Offer) { o.DPHBase = 0.1 }), // cheapest, but leaves
		offer(2, "RTX 4090", 1, ends(2*time.Hour)),
		offer(3, "RTX 4090", 1, ends(-time.Minute)),
		offer(4, "RTX 4090", 1), // no end date: not judged on it
	}
	chosen, ds := Select(p, offers)
	if chosen == nil || chosen.ID != 2 && chosen.ID != 4 {
		t.Fatalf("chosen %+v, want offer 2 or 4", chosen)
	}
	why := map[provider.OfferID]string{}
	for _, d := range ds {
		why[d.Offer.ID] = strings.Join(d.Reasons, "; ")
	}
	if want := "host leaves in 1h0m (offer ends 2026-12-04T13:00:00Z), before the run's worst-case end 2h0m after renting"; why[1] != want {
		t.Errorf("offer 1: %q\nwant %q", why[1], want)
	}
	if !strings.Contains(why[3], "host has already left") {
		t.Errorf("offer 3: %q, want the host already gone", why[3])
	}
	stages := Funnel(p, offers)
	if got := stages[len(stages)-2]; got.Constraint != "host stays 2h0m (the run's worst-case end)" || got.Left != 2 {
		t.Errorf("funnel stage %+v, want the host rule leaving 2", got)
	}
	p.MinHostTime = 0
	if chosen, _ := Select(p, offers); chosen == nil || chosen.ID != 1 {
		t.Errorf("without a bound the cheapest offer 1 is chosen; got %+v", chosen)
	}
}

// TestFastReadyRanksByExpectedCostToReady: with an image size known, a
// dearer host whose pull is much shorter wins under fast_ready, and the
// cheapest wins by default; without a size both rank by price.
func TestFastReadyRanksByExpectedCostToReady(t *testing.T) {
	slow := provider.Offer{ID: 1, MachineID: 1, GPUName: "RTX 4090", NumGPUs: 1, DPHBase: 0.30, InetDownMbps: 100, Reliability: 0.99, Rentable: true}
	fast := provider.Offer{ID: 2, MachineID: 2, GPUName: "RTX 4090", NumGPUs: 1, DPHBase: 0.45, InetDownMbps: 5000, Reliability: 0.99, Rentable: true}
	if d := PullTime(slow, 20e9); d != 1600*time.Second {
		t.Fatalf("20 GB at 100 Mb/s: %s, want 1600s", d)
	}
	if PullTime(slow, 0) != 0 || PullTime(provider.Offer{}, 20e9) != 0 {
		t.Fatal("a pull of an unknown size or on a host of unknown speed has a time")
	}
	for _, c := range []struct {
		prefer string
		bytes  int64
		want   provider.OfferID
	}{{"", 20e9, 1}, {PreferCheapest, 20e9, 1}, {PreferFastReady, 20e9, 2}, {PreferFastReady, 0, 1}} {
		p := Policy{Models: []string{"RTX 4090"}, Prefer: c.prefer, ImageBytes: c.bytes}
		chosen, ds := Select(p, []provider.Offer{slow, fast})
		if chosen == nil || chosen.ID != c.want {
			t.Fatalf("prefer %q, %d bytes: chose %+v, want offer %d (%+v)", c.prefer, c.bytes, chosen, c.want, ds)
		}
	}
}
