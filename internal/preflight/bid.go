package preflight

import (
	"fmt"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
)

// checkMaxBid refuses an interruptible policy whose gpu.max_bid is under
// the floor of every offer it could otherwise rent (min_bid + storage):
// no bid it may make could ever run.
func checkMaxBid(cfg *config.Config, offers []provider.Offer) *Error {
	p := cfg.Policy()
	if !p.Interruptible || p.MaxBid <= 0 {
		return nil
	}
	if chosen, _ := policy.Select(p, offers); chosen != nil {
		return nil
	}
	loose := p
	loose.MaxBid = 0
	chosen, _ := policy.Select(loose, offers)
	if chosen == nil {
		return nil // something else removes every offer: the report says what
	}
	floor := chosen.MinBid + policy.StorageDPH(*chosen, p.DiskGB)
	return &Error{Problems: []Problem{{Field: "gpu.max_bid", Value: fmt.Sprintf("%g", p.MaxBid),
		What: fmt.Sprintf("is under min_bid + storage of every offer the policy allows (the lowest is $%.4f/h, on-demand $%.4f/h): no bid within it can run", floor, policy.TotalDPH(*chosen, p.DiskGB)),
		Fix:  fmt.Sprintf("raise gpu.max_bid to at least %.3f (with margin: %.3f), or rent on demand (remove gpu.interruptible)", provider.RoundBid(floor), provider.RoundBid(chosen.MinBid*(1+p.BidMargin)+policy.StorageDPH(*chosen, p.DiskGB)))}}}
}
