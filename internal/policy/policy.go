// Package policy chooses one offer for a rental. It is pure: no I/O, no
// clock. Every offer gets a decision with reasons, so `vastrun offers
// --explain` can show why each was chosen or rejected.
//
// Price is judged on the total an hour costs for the requested disk
// (GPU + storage), never on the GPU price alone.
package policy

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// Policy is what a rental must satisfy.
type Policy struct {
	// Models are acceptable GPU names as Vast spells them ("RTX 4090"); an
	// underscore is read as a space. Empty accepts any model.
	Models          []string
	Count           int     // GPUs per instance (default 1)
	MinVRAMGB       float64 // per GPU, in GB of 1000 MB as Vast's queries count
	MinCUDA         float64
	MinReliability  float64
	Verified        bool
	Datacenter      bool
	AllowCountries  []string // two-letter codes; empty allows all
	DenyCountries   []string
	DiskGB          float64 // disk to rent; priced into the total
	MaxDPH          float64 // ceiling on GPU + storage $/h; 0 means none
	MinInetDownMbps float64
	// ExcludeMachines are machines that already failed this run.
	ExcludeMachines []int64
	// Interruptible rents by bid (see bid.go): offers come from a bid
	// search, are judged at Bid + storage, and must leave that under MaxBid.
	Interruptible bool
	BidMargin     float64 // over min_bid (default DefaultBidMargin)
	MaxBid        float64 // ceiling on bid + storage $/h; 0 means none
	// MinHostTime is how long after renting the run may still need its
	// host, at worst: an offer whose host leaves sooner is rejected, since
	// no rental outlives its host's end date. 0 means no bound. It is
	// derived from the frozen spec's durations wherever a manifest is
	// built or loaded (spec.HostTime), never frozen itself, so a manifest
	// an older vastrun froze resumes unchanged.
	MinHostTime time.Duration `json:"-"`
	// Prefer ranks the eligible offers: "" or PreferCheapest by $/h,
	// PreferFastReady by ReadyCost (frozen as gpu.prefer says).
	Prefer string `json:",omitempty"`
	// ImageBytes is the image's compressed size (0: unknown), from its
	// registry manifest: the pull every host must make before "running".
	// Like MinHostTime it is derived from the manifest (its image_bytes),
	// never frozen in the policy.
	ImageBytes int64 `json:"-"`
}

// What Prefer may say.
const (
	PreferCheapest  = "cheapest"
	PreferFastReady = "fast_ready"
)

// BootOverhead is the time to ready that does not depend on the image:
// scheduling, creating and starting the container. It only ranks offers
// (fast_ready); no deadline is built from it.
const BootOverhead = time.Minute

// PullTime is how long o's host is expected to take to pull an image of
// bytes (compressed), at its measured download rate (inet_down, Mb/s); 0
// when either is unknown.
func PullTime(o provider.Offer, bytes int64) time.Duration {
	if bytes <= 0 || o.InetDownMbps <= 0 {
		return 0
	}
	return time.Duration(float64(bytes) * 8 / (o.InetDownMbps * 1e6) * float64(time.Second))
}

// ReadyCost is what fast_ready ranks by: the offer's $/h (total, as the
// policy prices it) × the expected time to ready, BootOverhead plus the
// image's pull on its host.
func (p Policy) ReadyCost(o provider.Offer) float64 {
	return p.Price(o) * (BootOverhead + PullTime(o, p.ImageBytes)).Hours()
}

// Normalized fills defaults and canonical spellings.
func (p Policy) Normalized() Policy {
	if p.Count <= 0 {
		p.Count = 1
	}
	if p.DiskGB <= 0 {
		p.DiskGB = 10
	}
	models := make([]string, len(p.Models))
	for i, m := range p.Models {
		models[i] = strings.ReplaceAll(strings.TrimSpace(m), "_", " ")
	}
	p.Models = models
	up := func(cc []string) []string {
		out := make([]string, len(cc))
		for i, c := range cc {
			out[i] = strings.ToUpper(strings.TrimSpace(c))
		}
		return out
	}
	p.AllowCountries, p.DenyCountries = up(p.AllowCountries), up(p.DenyCountries)
	if p.Prefer == PreferCheapest { // the default, frozen as such
		p.Prefer = ""
	}
	return p
}

// Validate reports a policy that cannot be satisfied by construction.
func (p Policy) Validate() error {
	var errs []string
	if p.Count < 0 || p.Count > 16 {
		errs = append(errs, fmt.Sprintf("count %d is outside 1..16", p.Count))
	}
	if p.MaxDPH < 0 {
		errs = append(errs, "max_dph must not be negative")
	}
	if p.MinReliability < 0 || p.MinReliability > 1 {
		errs = append(errs, fmt.Sprintf("min_reliability %v is outside 0..1", p.MinReliability))
	}
	if p.DiskGB < 0 {
		errs = append(errs, "disk_gb must not be negative")
	}
	for _, c := range append(append([]string{}, p.AllowCountries...), p.DenyCountries...) {
		if len(strings.TrimSpace(c)) != 2 {
			errs = append(errs, fmt.Sprintf("country %q is not a two-letter code", c))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("GPU policy: %s", strings.Join(errs, "; "))
	}
	return nil
}

// TotalDPH is what the offer costs an hour with diskGB of storage.
func TotalDPH(o provider.Offer, diskGB float64) float64 {
	return o.DPHBase + o.StorageCostMonth*diskGB/720
}

// Query is the server-side search for this policy, in the wire form. The
// result is re-checked locally by Select: a server filter is a hint, never
// the decision.
func (p Policy) Query(limit int) provider.Query {
	p = p.Normalized()
	q := provider.Query{
		"rentable": map[string]any{"eq": true},
		"rented":   map[string]any{"eq": false},
		"external": map[string]any{"eq": false},
		"num_gpus": map[string]any{"eq": p.Count},
		"order":    [][]string{{"dph_total", "asc"}},
		"type":     map[bool]string{false: "on-demand", true: "bid"}[p.Interruptible],
		// Price the storage the rental will really use.
		"allocated_storage": p.DiskGB,
		"disk_space":        map[string]any{"gte": p.DiskGB},
	}
	if limit > 0 {
		q["limit"] = limit
	}
	if len(p.Models) > 0 {
		list := make([]any, len(p.Models))
		for i, m := range p.Models {
			list[i] = m
		}
		q["gpu_name"] = map[string]any{"in": list}
	}
	if p.Verified {
		q["verified"] = map[string]any{"eq": true}
	}
	if p.Datacenter {
		q["datacenter"] = map[string]any{"eq": true}
	}
	if p.MinVRAMGB > 0 {
		q["gpu_ram"] = map[string]any{"gte": p.MinVRAMGB * 1000}
	}
	if p.MinCUDA > 0 {
		q["cuda_max_good"] = map[string]any{"gte": p.MinCUDA}
	}
	if p.MinReliability > 0 {
		q["reliability"] = map[string]any{"gte": p.MinReliability}
	}
	if p.MaxDPH > 0 {
		q["dph_total"] = map[string]any{"lte": p.MaxDPH}
	}
	if p.MinInetDownMbps > 0 {
		q["inet_down"] = map[string]any{"gte": p.MinInetDownMbps}
	}
	if len(p.AllowCountries) > 0 {
		list := make([]any, len(p.AllowCountries))
		for i, c := range p.AllowCountries {
			list[i] = c
		}
		q["geolocation"] = map[string]any{"in": list}
	}
	return q
}

// LooseQuery searches only by model, count and availability, leaving
// every other criterion to Select, so that the rejected offers come back
// too and each can be explained.
func (p Policy) LooseQuery(limit int) provider.Query {
	strict := p.Query(limit)
	q := provider.Query{}
	for _, k := range []string{"rentable", "rented", "external", "num_gpus", "order", "type", "allocated_storage", "limit", "gpu_name"} {
		if v, ok := strict[k]; ok {
			q[k] = v
		}
	}
	return q
}

// Decision is the verdict on one offer.
type Decision struct {
	Offer    provider.Offer
	TotalDPH float64
	// ReadyCost is the offer's expected cost to ready (fast_ready only).
	ReadyCost float64 `json:",omitempty"`
	Eligible  bool
	Chosen    bool
	Reasons   []string
}

// Select judges every offer and picks the cheapest eligible one, or with
// Prefer fast_ready the one of lowest ReadyCost (ties go to the cheaper,
// then the more reliable, then the lower id). chosen is nil when none qualifies.
// Decisions come back eligible first, cheapest first.
func Select(p Policy, offers []provider.Offer) (chosen *provider.Offer, decisions []Decision) {
	p = p.Normalized()
	excluded := map[int64]bool{}
	for _, m := range p.ExcludeMachines {
		excluded[m] = true
	}
	fast := p.Prefer == PreferFastReady
	for _, o := range offers {
		d := Decision{Offer: o, TotalDPH: p.Price(o)}
		if fast {
			d.ReadyCost = p.ReadyCost(o)
		}
		d.Reasons = p.rejections(o, d.TotalDPH, excluded)
		d.Eligible = len(d.Reasons) == 0
		decisions = append(decisions, d)
	}
	sort.SliceStable(decisions, func(i, j int) bool {
		a, b := decisions[i], decisions[j]
		if a.Eligible != b.Eligible {
			return a.Eligible
		}
		if a.ReadyCost != b.ReadyCost { // 0 for both unless fast_ready
			return a.ReadyCost < b.ReadyCost
		}
		if a.TotalDPH != b.TotalDPH {
			return a.TotalDPH < b.TotalDPH
		}
		if a.Offer.Reliability != b.Offer.Reliability {
			return a.Offer.Reliability > b.Offer.Reliability
		}
		return a.Offer.ID < b.Offer.ID
	})
	for i := range decisions {
		d := &decisions[i]
		switch {
		case !d.Eligible:
		case chosen == nil:
			d.Chosen = true
			o := d.Offer
			chosen = &o
			d.Reasons = []string{fmt.Sprintf("chosen: cheapest eligible at $%.4f/h for %g GB disk", d.TotalDPH, p.DiskGB)}
			if fast {
				d.Reasons = []string{fmt.Sprintf("chosen: lowest expected cost to ready, $%.4f ($%.4f/h for %g GB disk × %s: boot %s + pull %s at %.0f Mb/s)",
					d.ReadyCost, d.TotalDPH, p.DiskGB, secs(BootOverhead+PullTime(o, p.ImageBytes)), secs(BootOverhead), secs(PullTime(o, p.ImageBytes)), o.InetDownMbps)}
			}
		case fast:
			d.Reasons = []string{fmt.Sprintf("eligible, but its expected cost to ready $%.4f (pull %s at %.0f Mb/s) is more than the chosen $%.4f",
				d.ReadyCost, secs(PullTime(d.Offer, p.ImageBytes)), d.Offer.InetDownMbps, decisions[0].ReadyCost)}
		default:
			d.Reasons = []string{fmt.Sprintf("eligible, but $%.4f/h is more than the chosen $%.4f/h", d.TotalDPH, decisions[0].TotalDPH)}
		}
	}
	return chosen, decisions
}

func (p Policy) rejections(o provider.Offer, total float64, excluded map[int64]bool) []string {
	var r []string
	if len(p.Models) > 0 && !containsFold(p.Models, o.GPUName) {
		r = append(r, fmt.Sprintf("GPU %q is not one of %s", o.GPUName, strings.Join(p.Models, ", ")))
	}
	if o.NumGPUs != p.Count {
		r = append(r, fmt.Sprintf("has %d GPUs, policy wants %d", o.NumGPUs, p.Count))
	}
	if p.MinVRAMGB > 0 && o.GPURAMMB < p.MinVRAMGB*1000 {
		r = append(r, fmt.Sprintf("VRAM %.1f GB < %g GB", o.GPURAMMB/1000, p.MinVRAMGB))
	}
	if p.MinCUDA > 0 && o.CUDAMax+1e-9 < p.MinCUDA {
		r = append(r, fmt.Sprintf("CUDA %.1f < %.1f", o.CUDAMax, p.MinCUDA))
	}
	if p.MinReliability > 0 && o.Reliability < p.MinReliability {
		r = append(r, fmt.Sprintf("reliability %.4f < %.4f", o.Reliability, p.MinReliability))
	}
	if p.Verified && !o.Verified() {
		r = append(r, fmt.Sprintf("host is %s, policy wants verified", orUnknown(o.Verification)))
	}
	if p.Datacenter && o.HostingType != 1 {
		r = append(r, "not a datacenter host")
	}
	cc := o.CountryCode()
	if len(p.AllowCountries) > 0 && !containsFold(p.AllowCountries, cc) {
		r = append(r, fmt.Sprintf("country %s is not allowed (%s)", orUnknown(cc), strings.Join(p.AllowCountries, ", ")))
	}
	if containsFold(p.DenyCountries, cc) {
		r = append(r, fmt.Sprintf("country %s is denied", cc))
	}
	if o.DiskSpaceGB > 0 && o.DiskSpaceGB < p.DiskGB {
		r = append(r, fmt.Sprintf("disk %.0f GB < %g GB requested", o.DiskSpaceGB, p.DiskGB))
	}
	if p.MaxDPH > 0 && total > p.MaxDPH+1e-12 {
		r = append(r, fmt.Sprintf("$%.4f/h (GPU $%.4f + storage $%.4f) is over the ceiling $%.4f/h", total, o.DPHBase, total-o.DPHBase, p.MaxDPH))
	}
	if why := p.bidRejection(o); why != "" {
		r = append(r, why)
	}
	if p.MinInetDownMbps > 0 && o.InetDownMbps < p.MinInetDownMbps {
		r = append(r, fmt.Sprintf("download %.0f Mb/s < %g", o.InetDownMbps, p.MinInetDownMbps))
	}
	if why := p.hostRejection(o); why != "" {
		r = append(r, why)
	}
	if excluded[o.MachineID] {
		r = append(r, fmt.Sprintf("machine %d already failed this run", o.MachineID))
	}
	if math.IsNaN(total) || total <= 0 {
		r = append(r, "price missing")
	}
	return r
}

// hostRejection says why an offer's host leaves too soon ("" when it
// stays long enough, or the offer names no end).
func (p Policy) hostRejection(o provider.Offer) string {
	left, known := o.HostLeft()
	if p.MinHostTime <= 0 || !known || left >= p.MinHostTime {
		return ""
	}
	when := "has already left"
	if left > 0 {
		when = "leaves in " + roundDur(left)
	}
	return fmt.Sprintf("host %s (offer ends %s), before the run's worst-case end %s after renting", when,
		o.HostEnd.UTC().Format(time.RFC3339), roundDur(p.MinHostTime))
}

// roundDur writes d to the minute: 2h0m, not 2h0m0s.
// secs writes d to the second.
func secs(d time.Duration) string { return d.Round(time.Second).String() }

func roundDur(d time.Duration) string {
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
