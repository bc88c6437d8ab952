//go:build linux

package sha256x2

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time: the benchmarks report bytes
// per CPU-second as well as per wall-second, since the figure that matters
// (hashing is CPU-bound in the restore) should not depend on how loaded the
// machine was.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
