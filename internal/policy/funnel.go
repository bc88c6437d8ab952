package policy

import (
	"fmt"
	"math"
	"strings"

	"github.com/vastrun/vastrun/internal/provider"
)

// Stage is one constraint of a funnel and how many offers were left after it.
type Stage struct {
	Constraint string `json:"constraint"`
	Left       int    `json:"left"`
}

type check struct {
	name string
	ok   func(p Policy, o provider.Offer, total float64) bool
}

// checks are the constraints of rejections, named and in a fixed order.
func (p Policy) checks() []check {
	var cs []check
	add := func(on bool, name string, ok func(p Policy, o provider.Offer, total float64) bool) {
		if on {
			cs = append(cs, check{name, ok})
		}
	}
	add(len(p.Models) > 0, "gpu.models "+strings.Join(p.Models, ", "), func(p Policy, o provider.Offer, _ float64) bool { return containsFold(p.Models, o.GPUName) })
	add(true, fmt.Sprintf("gpu.count %d", p.Count), func(p Policy, o provider.Offer, _ float64) bool { return o.NumGPUs == p.Count })
	add(p.MinVRAMGB > 0, fmt.Sprintf("gpu.min_vram_gb %g", p.MinVRAMGB), func(p Policy, o provider.Offer, _ float64) bool { return o.GPURAMMB >= p.MinVRAMGB*1000 })
	add(p.MinCUDA > 0, fmt.Sprintf("gpu.min_cuda %g", p.MinCUDA), func(p Policy, o provider.Offer, _ float64) bool { return o.CUDAMax+1e-9 >= p.MinCUDA })
	add(p.MinReliability > 0, fmt.Sprintf("gpu.min_reliability %g", p.MinReliability), func(p Policy, o provider.Offer, _ float64) bool { return o.Reliability >= p.MinReliability })
	add(p.Verified, "gpu.verified true", func(p Policy, o provider.Offer, _ float64) bool { return o.Verified() })
	add(p.Datacenter, "gpu.datacenter true", func(p Policy, o provider.Offer, _ float64) bool { return o.HostingType == 1 })
	add(len(p.AllowCountries) > 0, "gpu.countries.allow "+strings.Join(p.AllowCountries, ", "), func(p Policy, o provider.Offer, _ float64) bool {
		return containsFold(p.AllowCountries, o.CountryCode())
	})
	add(len(p.DenyCountries) > 0, "gpu.countries.deny "+strings.Join(p.DenyCountries, ", "), func(p Policy, o provider.Offer, _ float64) bool {
		return !containsFold(p.DenyCountries, o.CountryCode())
	})
	add(true, fmt.Sprintf("gpu.disk_gb %g", p.DiskGB), func(p Policy, o provider.Offer, _ float64) bool {
		return !(o.DiskSpaceGB > 0 && o.DiskSpaceGB < p.DiskGB)
	})
	add(p.MaxDPH > 0, fmt.Sprintf("gpu.max_dph %g", p.MaxDPH), func(p Policy, o provider.Offer, total float64) bool { return total <= p.MaxDPH+1e-12 })
	add(p.Interruptible && p.MaxBid > 0, fmt.Sprintf("gpu.max_bid %g", p.MaxBid), func(p Policy, o provider.Offer, _ float64) bool { return p.bidRejection(o) == "" })
	add(p.MinInetDownMbps > 0, fmt.Sprintf("gpu.min_inet_down_mbps %g", p.MinInetDownMbps), func(p Policy, o provider.Offer, _ float64) bool { return o.InetDownMbps >= p.MinInetDownMbps })
	add(p.MinHostTime > 0, "host stays "+roundDur(p.MinHostTime)+" (the run's worst-case end)", func(p Policy, o provider.Offer, _ float64) bool {
		return p.hostRejection(o) == ""
	})
	add(len(p.ExcludeMachines) > 0, "machines that failed this run", func(p Policy, o provider.Offer, _ float64) bool {
		for _, m := range p.ExcludeMachines {
			if m == o.MachineID {
				return false
			}
		}
		return true
	})
	add(true, "a listed price", func(p Policy, o provider.Offer, total float64) bool { return !math.IsNaN(total) && total > 0 })
	return cs
}

// Funnel applies the policy's constraints one at a time and says how many
// offers each leaves. The first stage is every offer seen; the last
// stage's count equals the eligible offers of Select.
func Funnel(p Policy, offers []provider.Offer) []Stage {
	p = p.Normalized()
	left := offers
	stages := []Stage{{Constraint: "offers seen", Left: len(offers)}}
	for _, c := range p.checks() {
		var next []provider.Offer
		for _, o := range left {
			if c.ok(p, o, p.Price(o)) {
				next = append(next, o)
			}
		}
		left = next
		stages = append(stages, Stage{Constraint: c.name, Left: len(left)})
	}
	return stages
}

// RemovedBy names the constraint that took a funnel to zero ("" when
// offers are left, or when there were none to begin with).
func RemovedBy(stages []Stage) string {
	for i := 1; i < len(stages); i++ {
		if stages[i].Left == 0 && stages[i-1].Left > 0 {
			return fmt.Sprintf("%s (it removed the last %d)", stages[i].Constraint, stages[i-1].Left)
		}
	}
	return ""
}
