package cli

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestTransferGC(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	transferGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != 400 {
		t.Errorf("GOGC after transferGC = %d, want 400", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != 256<<20 {
		t.Errorf("memory limit after transferGC = %d, want %d", got, 256<<20)
	}

	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		transferGC(func(v string) string {
			if v == k {
				return "200"
			}
			return ""
		})
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("with %s set, transferGC changed GOGC to %d", k, got)
		}
		if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
			t.Errorf("with %s set, transferGC set a memory limit of %d", k, got)
		}
	}
}
