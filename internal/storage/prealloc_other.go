//go:build !linux

package storage

import "os"

// preallocate is a no-op where fallocate(2) is not available.
func preallocate(*os.File, int64) {}
