package policy

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

// The funnel and Select must agree on every offer set: they judge by the
// same constraints.
func TestFunnelAgreesWithSelect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"RTX 4090", "RTX 3090", "A100 SXM4"}
	for trial := 0; trial < 300; trial++ {
		var offers []provider.Offer
		for i := 0; i < rng.IntN(30); i++ {
			offers = append(offers, provider.Offer{ID: provider.OfferID(i + 1), MachineID: int64(rng.IntN(10)), GPUName: names[rng.IntN(3)], NumGPUs: 1 + rng.IntN(2),
				GPURAMMB: float64(rng.IntN(80000)), CUDAMax: float64(rng.IntN(13)), Reliability: rng.Float64(), DPHBase: rng.Float64() * 2,
				StorageCostMonth: rng.Float64(), DiskSpaceGB: float64(rng.IntN(100)), InetDownMbps: float64(rng.IntN(2000)), HostingType: rng.IntN(2)})
		}
		p := Policy{Models: names[:1+rng.IntN(2)], Count: 1, MinVRAMGB: float64(rng.IntN(40)), MinCUDA: float64(rng.IntN(12)),
			MinReliability: rng.Float64() / 2, MaxDPH: rng.Float64() * 2, DiskGB: 20, Datacenter: rng.IntN(2) == 0, ExcludeMachines: []int64{int64(rng.IntN(10))}}
		stages := Funnel(p, offers)
		_, ds := Select(p, offers)
		eligible := 0
		for _, d := range ds {
			if d.Eligible {
				eligible++
			}
		}
		if got := stages[len(stages)-1].Left; got != eligible {
			t.Fatalf("trial %d: funnel leaves %d, Select finds %d eligible", trial, got, eligible)
		}
		if eligible == 0 && len(offers) > 0 && RemovedBy(stages) == "" {
			t.Fatalf("trial %d: no constraint named for zero offers: %+v", trial, stages)
		}
	}
}

func TestRemovedByNamesTheCeiling(t *testing.T) {
	offers := []provider.Offer{{ID: 1, GPUName: "RTX 4090", NumGPUs: 1, DPHBase: 0.5}}
	got := RemovedBy(Funnel(Policy{Models: []string{"RTX_4090"}, MaxDPH: 0.1}, offers))
	if !strings.HasPrefix(got, "gpu.max_dph 0.1") {
		t.Fatalf("got %q", got)
	}
}
