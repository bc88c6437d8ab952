//go:build !linux

package sha256x2

import "time"

// threadCPU: no per-thread CPU clock here; the benchmarks report wall MB/s
// only.
func threadCPU() (time.Duration, bool) { return 0, false }
