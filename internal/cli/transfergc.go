package cli

import (
	"os"
	"runtime/debug"
)

// transferGC sets the garbage collector of a process that restores or
// commits a checkpoint. Its live heap is small and bounded (the receive
// chunk pool, the connections' buffers, the manifest), but it allocates a
// few MiB per second of short-lived request state, and at the default
// GOGC the collector ran four times in a 64 × 4 MiB restore; each cycle's
// mark worker holds a quarter of the processors, half a core of two.
// Collecting at five times the live heap instead, with the heap capped at
// 256 MiB, cut the restore's CPU by 3–8% (docs/performance.md). GOGC or
// GOMEMLIMIT in the environment win.
func transferGC(getenv func(string) string) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(400)
	debug.SetMemoryLimit(256 << 20)
}
