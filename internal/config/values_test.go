package config

import (
	"strings"
	"testing"
)

func TestBadValuesNamedWithFix(t *testing.T) {
	base := "image: r@sha256:" + strings.Repeat("a", 64) + "\ntest: t\n"
	for _, c := range []struct{ yaml, want string }{
		{"budget: {max_spend: .nan}", "budget.max_spend NaN is not a finite number"},
		{"budget: {max_spend: .inf}", "budget.max_spend +Inf is not a finite number"},
		{"budget: {max_spend: -1}", "budget.max_spend -1 must be more than $0"},
		{"budget: {max_spend: 0}", "budget.max_spend 0 must be more than $0"},
		{"budget: {max_spend: 1e308}", "budget.max_spend 1e+308 is more than $100000"},
		{"budget: {max_spend: 5}\ngpu: {count: 0}", "gpu.count 0 must be at least 1"},
		{"budget: {max_spend: 5}\ngpu: {max_dph: .nan}", "gpu.max_dph NaN is not a finite number"},
		{"budget: {max_spend: 5}\nalert: {webhook: not a url}", `alert.webhook "not a url" is not an http(s) URL`},
		{"budget: {max_spend: 5}\ntimeouts: {ready: 0s}", "timeouts.ready 0s must be longer than zero"},
		{"budget: {max_spend: 5}\ntimeouts: {pull_stall: 0s}", "timeouts.pull_stall 0s must be longer than zero"},
		{"budget: {max_spend: 5}\ngpu: {prefer: fastest}", `gpu.prefer "fastest" is not cheapest or fast_ready`},
	} {
		_, err := Parse([]byte(base + c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.yaml, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "is required") {
			t.Errorf("%s: misreported as missing: %v", c.yaml, err)
		}
	}
	if _, err := Parse([]byte(base + "budget: {max_spend: 5}\n")); err != nil {
		t.Fatalf("a good config is refused: %v", err)
	}
	for _, p := range []string{"cheapest", "fast_ready"} {
		if _, err := Parse([]byte(base + "budget: {max_spend: 5}\ngpu: {prefer: " + p + "}\ntimeouts: {pull_stall: 90s}\n")); err != nil {
			t.Fatalf("gpu.prefer %s is refused: %v", p, err)
		}
	}
}
