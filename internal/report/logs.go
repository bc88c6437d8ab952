package report

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// LogFiles are a run's workload logs in its evidence directory, in the
// order they were written: the local gate and canary smoke, then the GPU
// test, or each training attempt's log. Only files that exist are listed.
func LogFiles(evidenceDir string) []string {
	var out []string
	for _, name := range []string{"gate.log", "local-smoke.log", "test.log"} {
		if p := filepath.Join(evidenceDir, name); exists(p) {
			out = append(out, p)
		}
	}
	attempts, _ := filepath.Glob(filepath.Join(evidenceDir, "train.attempt-*.log"))
	sort.Slice(attempts, func(i, j int) bool { return attemptOf(attempts[i]) < attemptOf(attempts[j]) })
	return append(out, attempts...)
}

// attemptOf is N of train.attempt-N.log.
func attemptOf(p string) int {
	s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "train.attempt-"), ".log")
	n, _ := strconv.Atoi(s)
	return n
}
