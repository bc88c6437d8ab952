package storage

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"syscall"
	"testing"
)

func TestRecvBufferPolicy(t *testing.T) {
	for _, c := range []struct {
		name              string
		override, rmemMax int64
		want              int64
	}{
		{"default where the cap allows it", 0, 4 << 20, defaultRecvBuffer},
		{"default under a larger cap", 0, 32 << 20, defaultRecvBuffer},
		{"stock kernel cap: autotuning kept", 0, 212992, 0},
		{"cap unknown: autotuning kept", 0, 0, 0},
		{"explicit size, whatever the cap", 1 << 20, 212992, 1 << 20},
		{"explicitly off", -1, 32 << 20, 0},
	} {
		if got := recvBufferFor(c.override, c.rmemMax); got != c.want {
			t.Errorf("%s: recvBufferFor(%d, %d) = %d, want %d", c.name, c.override, c.rmemMax, got, c.want)
		}
	}
}

func TestRecvBufferFromEnvironment(t *testing.T) {
	for _, c := range []struct {
		env     string
		opt     int64
		want    int64
		wantErr bool
	}{
		{"", 0, 0, false},
		{"0", 0, -1, false},
		{"2", 0, 2 << 20, false},
		{"64", 0, 64 << 20, false},
		{"65", 0, 0, true},
		{"-1", 0, 0, true},
		{"lots", 0, 0, true},
		{"lots", 3 << 20, 3 << 20, false}, // Options win over the environment
	} {
		getenv := func(k string) string {
			if k == "VASTRUN_S3_RCVBUF_MIB" {
				return c.env
			}
			return ""
		}
		got, err := recvBufferSetting(Options{RecvBuffer: c.opt}, getenv)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("VASTRUN_S3_RCVBUF_MIB=%q, Options.RecvBuffer=%d: got %d, %v; want %d, error %v", c.env, c.opt, got, err, c.want, c.wantErr)
		}
	}
	if _, err := NewS3Store("b", "p", Options{Endpoint: "http://127.0.0.1:9", Getenv: func(k string) string {
		if k == "VASTRUN_S3_RCVBUF_MIB" {
			return "big"
		}
		return ""
	}}); err == nil {
		t.Error("NewS3Store accepted VASTRUN_S3_RCVBUF_MIB=big")
	}
}

// rcvbuf dials a loopback listener through tr and returns the client
// socket's SO_RCVBUF as the kernel reports it.
func rcvbuf(t *testing.T, tr *http.Transport) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := rc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return got
}

// The transport NewS3Store builds asks for the buffer on every connection
// it dials, and leaves the kernel's default alone when told to.
func TestTransportAsksForTheRecvBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's SO_RCVBUF accounting checked here is Linux's")
	}
	max := rmemMax()
	if max <= 0 {
		t.Fatal("net.core.rmem_max unreadable on Linux")
	}
	untuned := rcvbuf(t, &http.Transport{})
	ask := min(int64(1<<20), max)
	if 2*ask == int64(untuned) {
		ask /= 2 // so the asked-for buffer is told apart from the default
	}
	tuned := &http.Transport{}
	tuneTransport(tuned, 8, ask)
	if got := rcvbuf(t, tuned); int64(got) != 2*ask { // Linux doubles SO_RCVBUF for its bookkeeping
		t.Errorf("SO_RCVBUF of a tuned connection = %d, want %d (2 × %d asked; the default is %d)", got, 2*ask, ask, untuned)
	}
	off := &http.Transport{}
	tuneTransport(off, 8, 0)
	if got := rcvbuf(t, off); got != untuned {
		t.Errorf("SO_RCVBUF with the buffer off = %d, want the kernel's default %d", got, untuned)
	}
}
