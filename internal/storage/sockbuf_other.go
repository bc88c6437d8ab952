//go:build !linux

package storage

// rmemMax is unknown off Linux: the default buffer stays off and only an
// explicit Options.RecvBuffer or VASTRUN_S3_RCVBUF_MIB sets one.
func rmemMax() int64 { return 0 }
