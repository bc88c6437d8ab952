package remote_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/remote"
	"golang.org/x/crypto/ssh"
)

// instance rents a running simulated instance and returns its endpoints.
func instance(t *testing.T) (*sim.Server, *vast.Client, provider.InstanceID, []remote.Endpoint, remote.KeyPair, string) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1785200000, 0))
	s, err := sim.New(sim.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	c, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey()})
	ctx := context.Background()
	offers, _ := c.SearchOffers(ctx, provider.Query{"num_gpus": map[string]any{"eq": 1}, "rentable": map[string]any{"eq": true}})
	res, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "remote-test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	kp, err := remote.EnsureKeyPair(dir, "vastrun-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AttachSSHKey(ctx, res.InstanceID, kp.AuthorizedKey); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	inst, err := c.ShowInstance(ctx, res.InstanceID)
	if err != nil || !inst.Running() {
		t.Fatalf("%+v %v", inst, err)
	}
	var eps []remote.Endpoint
	for _, e := range inst.SSHEndpoints() {
		eps = append(eps, remote.Endpoint{Host: e.Host, Port: e.Port})
	}
	return s, c, res.InstanceID, eps, kp, dir
}

func TestKeyPairIsPrivateAndStable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	a, err := remote.EnsureKeyPair(dir, "c")
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "id_ed25519"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", fi.Mode().Perm())
	}
	b, _ := remote.EnsureKeyPair(dir, "c")
	if a.AuthorizedKey != b.AuthorizedKey || !strings.HasPrefix(a.AuthorizedKey, "ssh-ed25519 ") {
		t.Fatalf("%q vs %q", a.AuthorizedKey, b.AuthorizedKey)
	}
}

func TestRunEnvExitCodesAndFiles(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	ctx := context.Background()
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	secret := "s3cr3t-" + strings.Repeat("q", 20)
	var out strings.Builder
	err = c.Run(ctx, remote.Command{
		Env: map[string]string{"TOKEN": secret, "QUOTED": "it's \"fine\" $HOME"},
		// The pattern comes from the environment, so no argv here holds it.
		Script: `printf '%s' "$TOKEN" > pat; n=0; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q -F -f pat && n=$((n+1)); done; echo "argv-hits=$n"; echo "$QUOTED"; rm pat`,
		Stdout: &out,
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out.String(), "argv-hits=0") || !strings.Contains(out.String(), `it's "fine" $HOME`) {
		t.Fatalf("output: %q", out.String())
	}

	err = c.Run(ctx, remote.Command{Script: "echo oops >&2; exit 9"})
	var ee *remote.ExitError
	if !errors.As(err, &ee) || ee.Code != 9 {
		t.Fatalf("exit: %v", err)
	}
	if _, err := c.Output(ctx, "echo bad >&2; exit 4"); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("Output should carry stderr: %v", err)
	}

	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "sub"), 0o755)
	os.WriteFile(filepath.Join(local, "run.sh"), []byte("#!/bin/sh\necho ran > result.txt\n"), 0o755)
	os.WriteFile(filepath.Join(local, "sub", "data.txt"), []byte("payload"), 0o644)
	if err := c.Upload(local, "app"); err != nil {
		t.Fatal(err)
	}
	var reported []int64
	if err := c.UploadProgress(local, "app2", func(n int64) { reported = append(reported, n) }); err != nil {
		t.Fatal(err)
	}
	// The running total ends at the bytes of run.sh and sub/data.txt.
	want := int64(len("#!/bin/sh\necho ran > result.txt\n") + len("payload"))
	if len(reported) == 0 || reported[len(reported)-1] != want {
		t.Fatalf("upload progress %v, want a running total ending at %d", reported, want)
	}
	if out, err := c.Output(ctx, "cd app && ./run.sh && cat result.txt sub/data.txt"); err != nil || out != "ran\npayload" {
		t.Fatalf("uploaded tree: %q %v", out, err)
	}
	dst := filepath.Join(t.TempDir(), "got.txt")
	if err := c.Download("app/result.txt", dst, 1024); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "ran\n" {
		t.Fatalf("downloaded %q", b)
	}
	if err := c.Download("nope.json", dst, 1024); !errors.Is(err, remote.ErrRemoteMissing) {
		t.Fatalf("missing file: %v", err)
	}
	if err := c.Download("app/sub/data.txt", dst, 3); err == nil {
		t.Fatal("size limit not enforced")
	}
}

func TestCancelKillsTheRemoteJob(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}
	c, err := d.Dial(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- c.Run(ctx, remote.Command{Script: "echo $$ > job.txt; echo started; sleep 30 & wait", Stdout: &notifyWriter{ch: make(chan struct{})}})
	}()
	c3, _ := d.Dial(context.Background(), eps)
	for i := 0; ; i++ { // wait (real time: a real SSH server) until the job is up
		if out, _ := c3.Output(context.Background(), "cat job.txt 2>/dev/null"); strings.TrimSpace(out) != "" {
			break
		}
		if i > 200 {
			t.Fatal("job never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c3.Close()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// A killed job can linger a moment as a zombie until the simulator's
	// process reaps it; ps shows that as state Z, which counts as dead.
	c2, _ := d.Dial(context.Background(), eps)
	defer c2.Close()
	out, _ := c2.Output(context.Background(), `st=$(ps -o stat= -p "$(cat job.txt)" 2>/dev/null); case "$st" in ""|Z*) echo dead ;; *) echo alive ;; esac; ls .vastrun/*.pid 2>/dev/null | wc -l`)
	if f := strings.Fields(out); f[0] != "dead" || f[1] != "1" { // 1: the checking command's own pid file
		t.Fatalf("remote job survived the cancel: %q", out)
	}
}

// notifyWriter closes ch on the first write.
type notifyWriter struct {
	ch   chan struct{}
	done bool
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	if !w.done {
		w.done = true
		close(w.ch)
	}
	return len(p), nil
}

func TestHostKeyPinned(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	kh := filepath.Join(dir, "known_hosts")
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: kh}
	c, err := d.Dial(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if b, _ := os.ReadFile(kh); !strings.Contains(string(b), "ssh-ed25519") {
		t.Fatalf("host key not recorded: %q", b)
	}
	if c, err = d.Dial(context.Background(), eps); err != nil {
		t.Fatalf("second dial with the pinned key: %v", err)
	}
	c.Close()
	// Pin some other key for the same address: the real one must be refused.
	other, _ := remote.EnsureKeyPair(t.TempDir(), "")
	pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(other.AuthorizedKey))
	line := "[" + eps[0].Host + "]:" + strconv.Itoa(eps[0].Port) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	os.WriteFile(kh, []byte(line+"\n"), 0o600)
	if _, err := d.Dial(context.Background(), eps[:1]); !errors.Is(err, remote.ErrHostKeyChanged) {
		t.Fatalf("changed host key: %v", err)
	}
}

// A command's Stdin reaches it whole and literal (quotes, $, a line that
// looks like a delimiter), and no command line on the instance holds it.
func TestRunStdin(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	ctx := context.Background()
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	marker := "stdin-marker-" + strings.Repeat("z", 16)
	doc := `{"a":"it's $HOME and ` + "`x`" + `"}` + "\nEOF\nVASTRUN_STDIN_\n" + marker
	var out strings.Builder
	err = c.Run(ctx, remote.Command{
		Stdin:  []byte(doc),
		Env:    map[string]string{"MARK": marker},
		Script: `cat > got; printf '%s' "$MARK" > pat; n=0; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q -F -f pat && n=$((n+1)); done; echo "argv-hits=$n"; rm pat; cat got`,
		Stdout: &out,
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if want := "argv-hits=0\n" + doc + "\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	if err := c.Run(ctx, remote.Command{Stdin: []byte("a\x00b"), Script: "cat"}); !errors.Is(err, remote.ErrBinaryStdin) {
		t.Fatalf("a NUL byte: %v, want ErrBinaryStdin", err)
	}
}

// Output joins stdout and stderr on the instance: the program writes both
// to one pipe, so the log holds its lines in the order it wrote them.
func TestRunOutputIsOneStreamInOrder(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	ctx := context.Background()
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out strings.Builder
	script := `[ "$(readlink /proc/$$/fd/1)" = "$(readlink /proc/$$/fd/2)" ] && echo one-pipe || echo two-pipes
for i in 1 2 3 4 5 6 7 8 9 10; do echo "out $i"; echo "err $i" >&2; done; exit 3`
	err = c.Run(ctx, remote.Command{Script: script, Output: &out})
	var ee *remote.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("run: %v, want exit 3", err)
	}
	want := "one-pipe\n"
	for i := 1; i <= 10; i++ {
		want += fmt.Sprintf("out %d\nerr %d\n", i, i)
	}
	if out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
}
