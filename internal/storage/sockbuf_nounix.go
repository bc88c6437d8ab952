//go:build !unix

package storage

func setRecvBuffer(uintptr, int) {}
