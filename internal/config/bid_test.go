package config

import (
	"strings"
	"testing"
	"time"
)

const trainBase = `
image: ghcr.io/acme/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
budget: {max_spend: 5}
train: {command: python3 train.py, checkpoint_uri: "file:///tmp/x"}
`

func TestInterruptibleKeys(t *testing.T) {
	c, err := Parse([]byte(trainBase + "gpu: {interruptible: true, max_bid: 0.4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy()
	if !p.Interruptible || p.MaxBid != 0.4 || p.BidMargin != 0.1 || c.Train.OnOutbid != OnOutbidReplace || c.Train.OutbidWait.Duration() != 10*time.Minute {
		t.Fatalf("defaults: policy %+v, on_outbid %q wait %v", p, c.Train.OnOutbid, c.Train.OutbidWait)
	}
	q := p.Query(10)
	if q["type"] != "bid" {
		t.Errorf("an interruptible policy searches type %v, want bid", q["type"])
	}
	c, err = Parse([]byte(strings.Replace(trainBase, "train: {", "train: {on_outbid: wait, outbid_wait: 3m, ", 1) + "gpu: {interruptible: true, max_dph: 0.7, bid: {margin: 0.25}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.GPU.MaxBid != 0.7 || c.Policy().BidMargin != 0.25 || c.Train.OnOutbid != "wait" || c.Train.OutbidWait.Duration() != 3*time.Minute {
		t.Fatalf("max_bid from max_dph, margin, policy: %+v %+v", c.GPU, c.Train)
	}
}

func TestInterruptibleKeysRefused(t *testing.T) {
	cases := []struct{ gpu, train, want string }{
		{"gpu: {interruptible: true}\n", "", "gpu.max_bid is required"},
		{"gpu: {max_bid: 0.3}\n", "", "apply to interruptible rentals: add gpu.interruptible"},
		{"gpu: {interruptible: true, max_bid: 9}\n", "", "gpu.max_bid $9/h is more than budget.max_spend $5"},
		{"gpu: {interruptible: true, max_bid: 0.4, bid: {margin: -1}}\n", "", "gpu.bid.margin -1 is outside 0..10"},
		{"gpu: {interruptible: true, max_bid: 0.4}\n", "on_outbid: pray, ", `train.on_outbid "pray" is not replace, rebid or wait`},
		{"gpu: {}\n", "on_outbid: rebid, ", "train.on_outbid and train.outbid_wait apply to interruptible rentals"},
		{"gpu: {interruptible: true, max_bid: 0.4, bid: {marginn: 1}}\n", "", `unknown key "marginn" in gpu.bid: did you mean margin? (allowed: margin)`},
	}
	for _, tc := range cases {
		y := strings.Replace(trainBase, "train: {", "train: {"+tc.train, 1) + tc.gpu
		if _, err := Parse([]byte(y)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s%s: err = %v, want it to say %q", tc.gpu, tc.train, err, tc.want)
		}
	}
}

func TestInterruptibleWarningOutsideTrain(t *testing.T) {
	c := &Config{GPU: GPU{Interruptible: true}}
	if w := c.InterruptibleWarning("ci"); !strings.Contains(w, "fails the step") {
		t.Errorf("ci: %q", w)
	}
	if w := c.InterruptibleWarning("train"); w != "" {
		t.Errorf("train: %q", w)
	}
}
