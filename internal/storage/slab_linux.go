package storage

import (
	"syscall"
	"unsafe"
)

// chunkSlab returns n bytes for the receive chunks, outside the Go heap:
// an anonymous mapping aligned to 2 MiB and advised for transparent huge
// pages, so the whole pool costs a few page faults instead of one per
// 4 KiB (and the collector never frees it). It falls back to the heap.
func chunkSlab(n int) []byte {
	const huge = 2 << 20
	m, err := syscall.Mmap(-1, 0, n+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]byte, n)
	}
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(m))) % huge); r != 0 {
		off = huge - r
	}
	// The unaligned ends stay mapped and untouched: address space, no memory.
	b := m[off : off+n : off+n]
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // an optimisation: without it the pages are 4 KiB
	return b
}
