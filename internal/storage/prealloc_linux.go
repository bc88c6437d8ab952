package storage

import (
	"os"
	"syscall"
)

// preallocate reserves size bytes for f without changing its length
// (FALLOC_FL_KEEP_SIZE), so parallel ranged writes skip ext4's per-page
// delayed allocation (about a fifth of the kernel's write cost here). A
// file system that cannot is left to allocate as it writes.
func preallocate(f *os.File, size int64) {
	const keepSize = 0x1
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { _ = syscall.Fallocate(int(fd), keepSize, 0, size) }) //nolint:errcheck // an optimisation: a file system that cannot is left to allocate as it writes
	}
}
