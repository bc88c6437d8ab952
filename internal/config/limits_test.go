package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/label"
)

// Each limit: the largest (or smallest) value accepted, and one past it
// refused with the key named.
func TestLimitsAtTheirBoundaries(t *testing.T) {
	base := "image: r@sha256:" + strings.Repeat("a", 64) + "\nbudget: {max_spend: 5}\n"
	quoted := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
	envEntry := MaxEnvEntryBytes - len("BIG=")
	// Five variables of 60 KiB each pass one by one but not together.
	var many strings.Builder
	for i := range 5 {
		fmt.Fprintf(&many, "  V%d: %s\n", i, quoted(60<<10))
	}
	for _, c := range []struct {
		name, yaml, want string // want "": accepted
	}{
		{"test at the limit", "test: " + quoted(MaxCommandBytes), ""},
		{"test over", "test: " + quoted(MaxCommandBytes+1), fmt.Sprintf("test is %d bytes, over the %d", MaxCommandBytes+1, MaxCommandBytes)},
		{"train.command over", "train: {command: " + quoted(MaxCommandBytes+1) + ", checkpoint_uri: file:///x}", "train.command is"},
		{"canary.smoke over", "test: t\ncanary: {smoke: " + quoted(MaxCommandBytes+1) + "}", "canary.smoke is"},
		{"env entry at the limit", "test: t\nenv: {BIG: " + quoted(envEntry) + "}", ""},
		{"env entry over", "test: t\nenv: {BIG: " + quoted(envEntry+1) + "}", "env.BIG is 65537 bytes"},
		{"env total over", "test: t\nenv:\n" + many.String(), "env holds"},
		{"ready at the floor", "test: t\ntimeouts: {ready: 5s}", ""},
		{"ready under", "test: t\ntimeouts: {ready: 4.9s}", "timeouts.ready 4.9s is under the 5s minimum"},
		{"job at the floor", "test: t\ntimeouts: {job: 1s}", ""},
		{"job 1ns", "test: t\ntimeouts: {job: 1ns}", "timeouts.job 1ns is under the 1s minimum"},
		{"teardown at the floor", "test: t\ntimeouts: {teardown: 4s}", ""},
		{"teardown under", "test: t\ntimeouts: {teardown: 3s}", "timeouts.teardown 3s is under the 4s minimum"},
		{"heartbeat_ttl at the floor", "test: t\ntimeouts: {heartbeat_ttl: 30s}", ""},
		{"heartbeat_ttl under", "test: t\ntimeouts: {heartbeat_ttl: 3s}", "timeouts.heartbeat_ttl 3s is under the 30s minimum: write a duration with its unit, e.g. heartbeat_ttl: 3m"},
		{"heartbeat_ttl 0", "test: t\ntimeouts: {heartbeat_ttl: 0s}", "timeouts.heartbeat_ttl 0s must be longer than zero"},
		{"label_prefix good", "test: t\nlabel_prefix: vastrun-ci", ""},
		{"label_prefix at the limit", "test: t\nlabel_prefix: " + strings.Repeat("p", label.MaxPrefixLen), ""},
		{"label_prefix too long", "test: t\nlabel_prefix: " + strings.Repeat("p", label.MaxPrefixLen+1), "label_prefix"},
		{"label_prefix punctuation", "test: t\nlabel_prefix: \"bad prefix!\"", `label_prefix "bad prefix!": use lowercase ASCII letters`},
		{"label_prefix non-ASCII", "test: t\nlabel_prefix: vastrün", `label_prefix "vastrün"`},
		{"label_prefix upper case", "test: t\nlabel_prefix: CI", `label_prefix "CI"`},
	} {
		_, err := Parse([]byte(base + c.yaml))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}
