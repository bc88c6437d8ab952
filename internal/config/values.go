package config

import (
	"fmt"
	"math"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxSpendCeiling is the largest budget.max_spend accepted: a larger one is
// a typo (1e308), not a budget.
const MaxSpendCeiling = 100000.0

// MinDiskGB is the smallest disk a create may ask for: the create's disk
// has "minimum: 8" in Vast's SLA documentation branch (vast-api.md §12.4).
const MinDiskGB = 8

// checkValues reports values that decode but make no sense: numbers that
// are not finite or out of range, counts below 1, URLs that are not URLs.
// Each message names the key, the value and the fix.
func (c *Config) checkValues(explicit map[string]bool) []string {
	var errs []string
	num := func(key string, v float64, min, max float64, fix string) {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			errs = append(errs, fmt.Sprintf("%s %v is not a finite number: %s", key, v, fix))
		case v < min || v > max:
			errs = append(errs, fmt.Sprintf("%s %v is outside %g..%g: %s", key, v, min, max, fix))
		}
	}
	b := c.Budget.MaxSpend
	switch {
	case math.IsNaN(b) || math.IsInf(b, 0):
		errs = append(errs, fmt.Sprintf("budget.max_spend %v is not a finite number: write the most this run may cost, in $, e.g. 5", b))
	case b < 0 || (b == 0 && explicit["budget.max_spend"]):
		errs = append(errs, fmt.Sprintf("budget.max_spend %v must be more than $0: write the most this run may cost, in $, e.g. 5", b))
	case b > MaxSpendCeiling:
		errs = append(errs, fmt.Sprintf("budget.max_spend %v is more than $%g: write the most this run may cost, in $, e.g. 5", b, MaxSpendCeiling))
	}
	g := c.GPU
	num("gpu.min_vram_gb", g.MinVRAMGB, 0, 10000, "write GB per GPU, e.g. 24")
	num("gpu.min_cuda", g.MinCUDA, 0, 100, "write a CUDA version, e.g. 12.1")
	num("gpu.min_reliability", g.MinReliability, 0, 1, "write a fraction, e.g. 0.98")
	num("gpu.disk_gb", g.DiskGB, 0, 100000, "write the disk to rent in GB, e.g. 20")
	if g.DiskGB > 0 && g.DiskGB < MinDiskGB {
		errs = append(errs, fmt.Sprintf("gpu.disk_gb %v is under Vast's minimum disk of %d GB: write at least %d, e.g. 20", g.DiskGB, MinDiskGB, MinDiskGB))
	}
	num("gpu.max_dph", g.MaxDPH, 0, 1000, "write the ceiling in $/h, e.g. 1.5")
	num("gpu.min_inet_down_mbps", g.MinInetDownMbps, 0, 1e6, "write Mb/s, e.g. 500")
	num("verify.min_free_disk_gb", c.Verify.MinFreeDiskGB, 0, 100000, "write GB, e.g. 10")
	if p := g.Prefer; p != "" && p != PreferCheapest && p != PreferFastReady {
		errs = append(errs, fmt.Sprintf("gpu.prefer %q is not %s or %s: %s ranks offers by $/h, %s by $/h × the expected time to ready (the image's pull at each host's download rate)", p, PreferCheapest, PreferFastReady, PreferCheapest, PreferFastReady))
	}
	for _, k := range []string{"gpu.count", "gpu.disk_gb", "train.cadence", "train.keep", "train.max_attempts"} {
		if explicit[k] && explicitZero[k](c) {
			errs = append(errs, fmt.Sprintf("%s 0 must be at least 1 (leave it out for the default)", k))
		}
	}
	for _, k := range []struct {
		key string
		v   Duration
	}{{"timeouts.ready", c.Timeouts.Ready}, {"timeouts.job", c.Timeouts.Job}, {"timeouts.teardown", c.Timeouts.Teardown}, {"timeouts.heartbeat_ttl", c.Timeouts.HeartbeatTTL}, {"timeouts.pull_stall", c.Timeouts.PullStall}} {
		if explicit[k.key] && k.v == 0 {
			errs = append(errs, fmt.Sprintf("%s 0s must be longer than zero (leave it out for the default)", k.key))
		}
	}
	if w := c.Alert.Webhook; w != "" {
		u, err := url.Parse(w)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Sprintf("alert.webhook %q is not an http(s) URL: write e.g. https://hooks.example.com/vastrun", w))
		}
	}
	if h := c.Canary.HealthURL; h != "" && !strings.HasPrefix(h, "/") {
		if u, err := url.Parse(h); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Sprintf("canary.health_url %q is not an http(s) URL or a /path", h))
		}
	}
	for _, p := range c.Canary.Ports {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Sprintf("canary.ports entry %d is outside 1..65535", p))
		}
	}
	if r := c.Canary.Request; r.Command != "" && r.URL != "" {
		errs = append(errs, "canary.request has both command and url: give one (a command that probes, or an HTTP request)")
	}
	if u := c.Canary.Request.URL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			errs = append(errs, fmt.Sprintf("canary.request.url %q is not an http(s) URL: write e.g. http://localhost:8000/v1/models", u))
		}
	}
	if c.Canary.Request.IsSet() && !c.Canary.IsServer() {
		errs = append(errs, "canary.request needs canary.health_url or canary.ports: it probes a server the smoke starts")
	}
	if s := c.Canary.Request.ExpectStatus; s != 0 && (s < 100 || s > 599) {
		errs = append(errs, fmt.Sprintf("canary.request.expect_status %d is not an HTTP status", s))
	}
	if t := c.Canary.Compare.Tolerance; t < 0 {
		errs = append(errs, fmt.Sprintf("canary.compare.tolerance %g must not be negative", t))
	}
	for _, k := range []struct {
		name string
		d    Duration
	}{{"canary.timeouts.unit", c.Canary.Timeouts.Unit}, {"canary.timeouts.smoke", c.Canary.Timeouts.Smoke}, {"canary.timeouts.stop", c.Canary.Timeouts.Stop}, {"canary.health_timeout", c.Canary.HealthTimeout}} {
		if k.d < 0 {
			errs = append(errs, fmt.Sprintf("%s %s must not be negative", k.name, k.d))
		}
	}
	return errs
}

var explicitZero = map[string]func(*Config) bool{
	"gpu.count":          func(c *Config) bool { return c.GPU.Count == 0 },
	"gpu.disk_gb":        func(c *Config) bool { return c.GPU.DiskGB == 0 },
	"train.cadence":      func(c *Config) bool { return c.Train.Cadence == 0 },
	"train.keep":         func(c *Config) bool { return c.Train.Keep == 0 },
	"train.max_attempts": func(c *Config) bool { return c.Train.MaxAttempts == 0 },
}

// explicitKeys lists the dotted keys the document sets, so a value written
// as 0 can be told from one left out (which gets its default).
func explicitKeys(n *yaml.Node, prefix string, out map[string]bool) {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		explicitKeys(n.Content[0], prefix, out)
		return
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := prefix + n.Content[i].Value
		out[k] = true
		explicitKeys(n.Content[i+1], k+".", out)
	}
}
