package chaos

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Seed counts come from a flag, else from the environment, else from the
// default. The environment is there so that .ci/run can make the README's
// one `go test -race ./...` the big chaos run (VASTRUN_CHAOS_SEEDS=300,
// VASTRUN_CHAOS_TRAIN_SEEDS=30, ...) instead of running this package a
// second time with flags, which repeated every schedule of the first run.
//
// VASTRUN_CHAOS_REPORT names a file each family appends one JSON line to
// ({"v":1,"family":"ci","schedules":300,"first_seed":1,"violations":0}):
// `go test ./...` prints nothing of a package that passes, so that line is
// how .ci/run proves how many schedules ran. A fresh file name per run also
// keeps `go test` from answering from its cache (the variable's value is
// part of the cache key).
const (
	envSeeds        = "VASTRUN_CHAOS_SEEDS"
	envTrainSeeds   = "VASTRUN_CHAOS_TRAIN_SEEDS"
	envMarketSeeds  = "VASTRUN_CHAOS_MARKET_SEEDS"
	envTeamSeeds    = "VASTRUN_CHAOS_TEAM_SEEDS"
	envDeadManSeeds = "VASTRUN_CHAOS_DEADMAN_SEEDS"
	envReport       = "VASTRUN_CHAOS_REPORT"
)

// envErrs holds the seed-count variables that are not counts; every family
// fails with them (a flag's default cannot fail a test by itself).
var envErrs []string

// seedCount is flag.Int with its default taken from $env when set.
func seedCount(name, env string, def int, usage string) *int {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			envErrs = append(envErrs, fmt.Sprintf("$%s=%q is not a number of schedules (want a whole number, 0 or more)", env, v))
		} else {
			def = n
		}
	}
	return flag.Int(name, def, usage+" (default from $"+env+" when set)")
}

// familyReport is one line of $VASTRUN_CHAOS_REPORT (version 1).
type familyReport struct {
	V          int    `json:"v"`
	Family     string `json:"family"`
	Schedules  int    `json:"schedules"`
	FirstSeed  uint64 `json:"first_seed"`
	Violations int    `json:"violations"`
}

// checkEnv fails t when a seed-count variable is not a count.
func checkEnv(t *testing.T) {
	t.Helper()
	if len(envErrs) > 0 {
		t.Fatal(strings.Join(envErrs, "; "))
	}
}

// report prints a family's figures (seen with -v or on a failure) and
// appends them to $VASTRUN_CHAOS_REPORT when it is set.
func report(t *testing.T, r familyReport) {
	t.Helper()
	r.V = 1
	fmt.Printf("chaos %s: %d schedules, %d violations\n", r.Family, r.Schedules, r.Violations)
	path := os.Getenv(envReport)
	if path == "" {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("write the chaos report: %v", err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("write the chaos report %s: %v", path, err)
	}
}

// runFamily runs n schedules from -seed on, one after another, prints and
// reports the count and the violations, and fails t if any schedule
// violated an invariant.
func runFamily(t *testing.T, family string, n int, one func(seed uint64) (violations []string, summary string)) {
	t.Helper()
	checkEnv(t)
	var failed []string
	for i := 0; i < n; i++ {
		seed := *firstSeed + uint64(i)
		v, summary := one(seed)
		if len(v) > 0 {
			failed = append(failed, fmt.Sprintf("seed %d (%s): %s", seed, summary, strings.Join(v, "; ")))
		}
	}
	report(t, familyReport{Family: family, Schedules: n, FirstSeed: *firstSeed, Violations: len(failed)})
	for _, f := range failed {
		fmt.Println("  " + f)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d %s schedules violated an invariant (rerun one with -seed N and a count of 1)", len(failed), n, family)
	}
}
