//go:build !linux

package storage

// chunkSlab returns n bytes for the receive chunks.
func chunkSlab(n int) []byte { return make([]byte, n) }
