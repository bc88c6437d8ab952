package storage

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// The socket receive buffer of S3 connections (docs/performance.md,
// "Checkpoint storage").
//
// Linux starts every TCP connection with a small receive window
// (net.ipv4.tcp_rmem's default, 128 KiB) and grows it as the reader keeps
// up. A checkpoint restore reads many objects of a few MiB, each on a new
// connection where the server closes after every GET (versitygw does), so
// most of each object arrives while the window is still small: the sender
// is held to small bursts, every window update restarts it, and on a
// loopback or LAN link that start-stop work runs in the receiver's system
// calls. Asking for a large buffer up front lets the server send an
// object at once: 15–25% less kernel CPU in a 64 × 4 MiB restore here.
//
// Setting SO_RCVBUF turns the kernel's autotuning off for the socket and
// is capped at net.core.rmem_max, so the default applies only where that
// cap allows the whole defaultRecvBuffer: on a stock kernel (rmem_max
// 208 KiB) a capped buffer would bound a long link's throughput below
// what autotuning reaches, and the kernel is left alone.
const (
	defaultRecvBuffer = 4 << 20 // the kernel doubles it for bookkeeping: 8 MiB of window
	maxRecvBufferMiB  = 64
)

// recvBufferFor returns the SO_RCVBUF to ask for on each connection (0:
// leave the kernel's autotuning on), given Options.RecvBuffer and the
// kernel's cap (0: unknown).
func recvBufferFor(override, rmemMax int64) int64 {
	switch {
	case override < 0:
		return 0
	case override > 0:
		return override
	case rmemMax >= defaultRecvBuffer:
		return defaultRecvBuffer
	}
	return 0
}

// recvBufferSetting resolves Options.RecvBuffer and VASTRUN_S3_RCVBUF_MIB
// (whole MiB, 0 turns the buffer off) into the override recvBufferFor
// takes.
func recvBufferSetting(o Options, getenv func(string) string) (int64, error) {
	if o.RecvBuffer != 0 {
		return o.RecvBuffer, nil
	}
	v := getenv("VASTRUN_S3_RCVBUF_MIB")
	if v == "" {
		return 0, nil
	}
	mib, err := strconv.Atoi(v)
	if err != nil || mib < 0 || mib > maxRecvBufferMiB {
		return 0, fmt.Errorf("VASTRUN_S3_RCVBUF_MIB=%q: want a whole number of MiB from 0 (the kernel's autotuning) to %d", v, maxRecvBufferMiB)
	}
	if mib == 0 {
		return -1, nil
	}
	return int64(mib) << 20, nil
}

// recvBufferDialer dials like minio-go's default transport (30 s connect
// timeout, 30 s keep-alive) and asks for a receive buffer of size bytes
// before connecting, so the first window the server sees is already
// large. A refused setsockopt leaves the connection to autotuning rather
// than failing it.
func recvBufferDialer(size int64) *net.Dialer {
	return &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { setRecvBuffer(fd, int(size)) })
		},
	}
}
