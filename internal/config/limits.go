package config

import (
	"fmt"
	"sort"
	"time"

	"github.com/vastrun/vastrun/internal/label"
)

// Size limits on what reaches the instance's shell. The test (and
// train.command, canary.smoke) runs there as `/bin/sh -c COMMAND`, and env:
// is exported into that shell, so both end up in one execve: Linux refuses
// a single argument or variable over MAX_ARG_STRLEN (128 KiB) and all of
// them together over ARG_MAX (a quarter of the stack limit: 2 MiB at the
// usual 8 MiB, shared with the image's and Vast's own environment) with
// "Argument list too long" — after the rental. Vast documents no limit of
// its own here (these values never go through its API), so vastrun keeps
// well inside the kernel's: half the per-argument limit for any one value,
// an eighth of the usual ARG_MAX for all of env:.
const (
	MaxCommandBytes  = 64 << 10
	MaxEnvEntryBytes = 64 << 10 // one KEY=value
	MaxEnvBytes      = 256 << 10
)

// Floors on the timeouts: below them a value is a unit slip (1ns, 500ms),
// not a timeout. They sit at or below what the simulator scenarios use,
// where the marketplace answers faster than Vast's: a ready under 5s cannot
// see a rental boot, a teardown under 4s cannot destroy and then confirm by
// id and by a label listing, and a job under 1s is shorter than starting
// the shell that runs it.
const (
	MinReady    = 5 * time.Second
	MinJob      = time.Second
	MinTeardown = 4 * time.Second
	// MinHeartbeatTTL: the controller beats every third of the TTL, over
	// SSH from a CI runner; a shorter TTL would fire on a slow link.
	MinHeartbeatTTL = 30 * time.Second
)

// checkLimits reports values vastrun could not deliver after renting: a
// command or environment too large for the instance's execve, a timeout
// too short to mean anything, a label prefix Vast's label filters and
// vastrun's own label format cannot carry. Each names the key and the fix.
func (c *Config) checkLimits() []string {
	var errs []string
	for _, k := range []struct{ key, v string }{
		{"test", c.Test}, {"train.command", c.Train.Command}, {"canary.smoke", c.Canary.Smoke},
	} {
		if n := len(k.v); n > MaxCommandBytes {
			errs = append(errs, fmt.Sprintf("%s is %d bytes, over the %d vastrun passes to the instance's shell as one argument: put the commands in a script, list it in upload: and run that (e.g. %s: sh ci/gpu-test.sh)", k.key, n, MaxCommandBytes, k.key))
		}
	}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		n := len(k) + 1 + len(c.Env[k])
		total += n + 1 // the execve string's NUL
		if n > MaxEnvEntryBytes {
			errs = append(errs, fmt.Sprintf("env.%s is %d bytes, over the %d one variable may have on the instance: put the value in a file, list it in upload: and read it from there", k, n, MaxEnvEntryBytes))
		}
	}
	if total > MaxEnvBytes {
		errs = append(errs, fmt.Sprintf("env holds %d bytes, over the %d all variables together may have on the instance: move large values into files listed in upload:", total, MaxEnvBytes))
	}
	for _, k := range []struct {
		key string
		v   Duration
		min time.Duration
	}{{"timeouts.ready", c.Timeouts.Ready, MinReady}, {"timeouts.job", c.Timeouts.Job, MinJob}, {"timeouts.teardown", c.Timeouts.Teardown, MinTeardown},
		{"timeouts.heartbeat_ttl", c.Timeouts.HeartbeatTTL, MinHeartbeatTTL}} {
		// Zero is the defaults' (or reported by checkValues when written).
		if k.v != 0 && k.v.Duration() < k.min {
			errs = append(errs, fmt.Sprintf("%s %s is under the %s minimum: write a duration with its unit, e.g. %s: %s", k.key, k.v, k.min, k.key[len("timeouts."):], minExample[k.key]))
		}
	}
	if p := c.LabelPrefix; p != "" {
		if err := label.CheckPrefix(p); err != nil {
			errs = append(errs, fmt.Sprintf("label_prefix %q: use lowercase ASCII letters (a-z), digits and inner dashes, at most %d characters, e.g. label_prefix: vastrun-ci", p, label.MaxPrefixLen))
		}
	}
	return errs
}

var minExample = map[string]string{"timeouts.ready": "10m", "timeouts.job": "30m", "timeouts.teardown": "4m", "timeouts.heartbeat_ttl": "3m"}
