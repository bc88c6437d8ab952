package config

import (
	"fmt"
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
)

// Bid is the bidding strategy of an interruptible rental: min_bid × (1 +
// Margin).
type Bid struct {
	// Margin over min_bid, a fraction (0.1 = 10%); nil means
	// policy.DefaultBidMargin. 0 bids exactly min_bid, the first to be
	// outbid.
	Margin *float64 `yaml:"margin"`
}

// MarginValue is the margin with its default.
func (b Bid) MarginValue() float64 {
	if b.Margin == nil {
		return policy.DefaultBidMargin
	}
	return *b.Margin
}

// What train.on_outbid takes.
const (
	OnOutbidReplace = "replace"
	OnOutbidRebid   = "rebid"
	OnOutbidWait    = "wait"
)

// DefaultOutbidWait is how long train.on_outbid wait waits for the market
// to come back by default.
const DefaultOutbidWait = 10 * time.Minute

func (c *Config) fillBidDefaults() {
	t := &c.Train
	if t.OnOutbid == "" {
		// A stopped instance keeps billing storage and may wait long:
		// replacing it is the default.
		t.OnOutbid = OnOutbidReplace
	}
	if t.OutbidWait == 0 {
		t.OutbidWait = Duration(DefaultOutbidWait)
	}
	if c.GPU.Interruptible && c.GPU.MaxBid == 0 && c.GPU.MaxDPH > 0 {
		c.GPU.MaxBid = c.GPU.MaxDPH
	}
}

// checkBid judges the interruptible keys; each message names the key and
// the fix.
func (c *Config) checkBid() []string {
	var errs []string
	g := c.GPU
	if m := g.Bid.Margin; m != nil && (math.IsNaN(*m) || *m < 0 || *m > 10) {
		errs = append(errs, fmt.Sprintf("gpu.bid.margin %v is outside 0..10: write the fraction over min_bid to bid, e.g. 0.1 for 10%%", *m))
	}
	if !g.Interruptible {
		if g.MaxBid != 0 || g.Bid.Margin != nil {
			errs = append(errs, "gpu.max_bid and gpu.bid apply to interruptible rentals: add gpu.interruptible: true, or remove them")
		}
		if c.Train.OnOutbid != OnOutbidReplace || c.Train.OutbidWait.Duration() != DefaultOutbidWait {
			errs = append(errs, "train.on_outbid and train.outbid_wait apply to interruptible rentals: add gpu.interruptible: true, or remove them")
		}
		return errs
	}
	switch {
	case g.MaxBid == 0:
		errs = append(errs, "gpu.max_bid is required with gpu.interruptible: the most a bid may cost, GPU + storage, in $/h (e.g. 0.5), or set gpu.max_dph")
	case math.IsNaN(g.MaxBid) || g.MaxBid < 0 || g.MaxBid > 128:
		errs = append(errs, fmt.Sprintf("gpu.max_bid %v is outside 0..128: write the most a bid may cost, GPU + storage, in $/h, e.g. 0.5", g.MaxBid))
	case c.Budget.MaxSpend > 0 && g.MaxBid > c.Budget.MaxSpend:
		errs = append(errs, fmt.Sprintf("gpu.max_bid $%g/h is more than budget.max_spend $%g: one hour at the ceiling would pass the budget; lower gpu.max_bid or raise budget.max_spend", g.MaxBid, c.Budget.MaxSpend))
	}
	switch c.Train.OnOutbid {
	case OnOutbidReplace, OnOutbidRebid, OnOutbidWait:
	default:
		errs = append(errs, fmt.Sprintf("train.on_outbid %q is not replace, rebid or wait", c.Train.OnOutbid))
	}
	return errs
}

// InterruptibleWarning is the warning for a ci or canary run on an
// interruptible rental, or "" when none is due.
func (c *Config) InterruptibleWarning(workflow string) string {
	if !c.GPU.Interruptible || workflow == "train" {
		return ""
	}
	return fmt.Sprintf("warning: gpu.interruptible on a %s run: an outbid stops the instance and fails the step (only train resumes from checkpoints)", workflow)
}
