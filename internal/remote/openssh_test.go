package remote_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/vastrun/vastrun/internal/remote"
)

// TestOpenSSH runs the remote layer against a real OpenSSH sshd started by
// scripts/start-sshd.sh (which .ci/run runs). It logs in as root, the case
// where sshd refuses signal requests, so cancellation must work through the
// job's pid file. With VASTRUN_TEST_SSHD_REQUIRED set, a missing server fails.
func TestOpenSSH(t *testing.T) {
	addr, keyPath := os.Getenv("VASTRUN_TEST_SSHD_ADDR"), os.Getenv("VASTRUN_TEST_SSHD_KEY")
	if addr == "" {
		if os.Getenv("VASTRUN_TEST_SSHD_REQUIRED") != "" {
			t.Fatal("VASTRUN_TEST_SSHD_REQUIRED is set but VASTRUN_TEST_SSHD_ADDR is not")
		}
		t.Skip(`start one with: eval "$(scripts/start-sshd.sh /tmp/sshd)"`)
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
	eps := []remote.Endpoint{{Host: host, Port: p}}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	d := remote.Dialer{Key: signer, KnownHostsPath: kh}
	ctx := context.Background()
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatalf("dial OpenSSH: %v", err)
	}
	defer c.Close()
	work := fmt.Sprintf("vastrun-openssh-test-%d", os.Getpid())
	t.Cleanup(func() { c.Output(context.Background(), "rm -rf "+work+" .vastrun/job-*.pid") })

	// Secrets travel on stdin, never in argv, and no AcceptEnv is needed.
	secret := "openssh-" + strings.Repeat("s", 24)
	var out strings.Builder
	err = c.Run(ctx, remote.Command{Env: map[string]string{"TOKEN": secret}, Stdout: &out,
		Script: `printf '%s' "$TOKEN" > /tmp/` + work + `.pat; n=0; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q -F -f /tmp/` + work + `.pat && n=$((n+1)); done; rm /tmp/` + work + `.pat; echo "argv-hits=$n"; echo "len=${#TOKEN}"`})
	if err != nil || !strings.Contains(out.String(), "argv-hits=0") || !strings.Contains(out.String(), fmt.Sprintf("len=%d", len(secret))) {
		t.Fatalf("env over stdin: %v %q", err, out.String())
	}
	var ee *remote.ExitError
	if err := c.Run(ctx, remote.Command{Script: "exit 42"}); !errors.As(err, &ee) || ee.Code != 42 {
		t.Fatalf("exit status: %v", err)
	}

	// SFTP both ways, against OpenSSH's internal-sftp.
	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "sub"), 0o755)
	os.WriteFile(filepath.Join(local, "sub", "data.bin"), []byte(strings.Repeat("x", 1<<20)), 0o644)
	if err := c.Upload(local, work); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if got, err := c.Output(ctx, "wc -c < "+work+"/sub/data.bin"); err != nil || strings.TrimSpace(got) != "1048576" {
		t.Fatalf("uploaded size: %q %v", got, err)
	}
	dst := filepath.Join(t.TempDir(), "back.bin")
	if err := c.Download(work+"/sub/data.bin", dst, 2<<20); err != nil {
		t.Fatalf("download: %v", err)
	}

	// Cancel: root logins get no signal delivery, so the pid file must do it.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(cctx, remote.Command{Script: "echo $$ > " + work + "/job.txt; sleep 300"}) }()
	c2, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var pid string
	for i := 0; i < 200 && pid == ""; i++ {
		got, _ := c2.Output(ctx, "cat "+work+"/job.txt 2>/dev/null; true")
		pid = strings.TrimSpace(got)
		time.Sleep(10 * time.Millisecond)
	}
	if pid == "" {
		t.Fatal("job never started")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("run after cancel: %v", err)
	}
	for i := 0; ; i++ {
		state, _ := c2.Output(ctx, `ps -o stat= -p `+pid+` 2>/dev/null; true`)
		if s := strings.TrimSpace(state); s == "" || strings.HasPrefix(s, "Z") {
			break
		}
		if i > 100 {
			t.Fatalf("the job (pid %s) survived cancellation: state %q", pid, state)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A dropped connection (its sshd process killed) is redialled: the probe
	// after it runs on a new connection, with the same pinned host key.
	before := c.Redials()
	if err := c.Run(ctx, remote.Command{Script: "kill -KILL $PPID"}); !errors.Is(err, remote.ErrConnectionLost) {
		t.Fatalf("run whose connection died under it: %v", err)
	}
	if out, err := c.Output(ctx, "echo back"); err != nil || out != "back\n" || c.Redials() != before+1 {
		t.Fatalf("probe after the drop: %q %v (redials %d -> %d)", out, err, before, c.Redials())
	}

	// A stalled connection (its sshd process stopped: TCP open, nothing
	// answered) is found dead by the keepalive and redialled.
	ds := d
	ds.KeepAlive = 200 * time.Millisecond
	cs, err := ds.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	spid, err := cs.Output(ctx, "echo $PPID")
	if err != nil {
		t.Fatal(err)
	}
	spid = strings.TrimSpace(spid)
	t.Cleanup(func() { c2.Output(context.Background(), "kill -KILL "+spid+" 2>/dev/null; true") })
	if _, err := c2.Output(ctx, "kill -STOP "+spid); err != nil {
		t.Fatal(err)
	}
	if out, err := cs.Output(ctx, "echo unstalled"); err != nil || out != "unstalled\n" || cs.Redials() != 1 {
		t.Fatalf("probe on a stalled connection: %q %v (%d redials)", out, err, cs.Redials())
	}

	// A changed host key is refused.
	other, _ := remote.EnsureKeyPair(t.TempDir(), "")
	os.WriteFile(kh, []byte(fmt.Sprintf("[%s]:%d %s\n", host, p, strings.Fields(other.AuthorizedKey)[0]+" "+strings.Fields(other.AuthorizedKey)[1])), 0o600)
	if _, err := d.Dial(ctx, eps); !errors.Is(err, remote.ErrHostKeyChanged) {
		t.Fatalf("changed host key: %v", err)
	}
}
