package remote_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/vastrun/vastrun/internal/remote"
)

// openSSHClient dials the sshd that scripts/start-sshd.sh started (see
// TestOpenSSH); a missing server fails when VASTRUN_TEST_SSHD_REQUIRED is set.
func openSSHClient(t *testing.T) *remote.Client {
	t.Helper()
	addr, keyPath := os.Getenv("VASTRUN_TEST_SSHD_ADDR"), os.Getenv("VASTRUN_TEST_SSHD_KEY")
	if addr == "" {
		if os.Getenv("VASTRUN_TEST_SSHD_REQUIRED") != "" {
			t.Fatal("VASTRUN_TEST_SSHD_REQUIRED is set but VASTRUN_TEST_SSHD_ADDR is not")
		}
		t.Skip(`start one with: eval "$(scripts/start-sshd.sh DIR)"`)
	}
	b, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(addr, ":")
	var p int
	fmt.Sscan(port, &p)
	d := remote.Dialer{Key: signer, KnownHostsPath: filepath.Join(t.TempDir(), "known_hosts")}
	c, err := d.Dial(context.Background(), []remote.Endpoint{{Host: host, Port: p}})
	if err != nil {
		t.Fatalf("dial OpenSSH: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOpenSSHSessionAndForward: vastrun ssh's two halves against a real
// sshd — a session on a real pty (and without one), the exit status, and
// a -L forward to an HTTP server listening on the sshd host's loopback.
func TestOpenSSHSessionAndForward(t *testing.T) {
	c := openSSHClient(t)
	ctx := context.Background()

	var out strings.Builder
	if err := c.Session(ctx, remote.SessionOptions{Command: "tty; echo $TERM; stty size", PTY: true, Term: "xterm", Width: 100, Height: 30, Stdout: &out}); err != nil {
		t.Fatalf("pty session: %v (%q)", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "/dev/pts/") || !strings.Contains(s, "xterm") || !strings.Contains(s, "30 100") {
		t.Fatalf("pty session output: %q", s)
	}
	out.Reset()
	err := c.Session(ctx, remote.SessionOptions{Command: "tty; exit 3", Stdout: &out})
	var ee *remote.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || !strings.Contains(out.String(), "not a tty") {
		t.Fatalf("no-pty session: %v %q", err, out.String())
	}

	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "healthy via "+r.URL.Path)
	})}
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(target)
	defer srv.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Forward(fctx, ln, target.Addr().String(), nil) }()
	for i := 0; i < 3; i++ { // several connections through one forward
		res, err := http.Get("http://" + ln.Addr().String() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "healthy via /health" {
			t.Fatalf("through the forward: %q", b)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("forward ended with %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the forward still listens after cancel")
	}
}
