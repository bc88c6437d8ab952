package remote_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/remote"
)

// A dropped connection is redialled: probes and copies are made again on
// the new connection; a command cut off while running reports the loss.
func TestRedialAfterDrop(t *testing.T) {
	s, _, id, eps, kp, dir := instance(t)
	kh := filepath.Join(dir, "known_hosts")
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: kh}
	ctx := context.Background()
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out, err := c.Output(ctx, "echo one"); err != nil || out != "one\n" {
		t.Fatalf("first probe: %q %v", out, err)
	}
	pinned, _ := os.ReadFile(kh)

	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHDrop, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Output(ctx, "echo two"); err != nil || out != "two\n" {
		t.Fatalf("probe after a drop: %q %v", out, err)
	}
	if n := c.Redials(); n != 1 {
		t.Fatalf("redials after one drop: %d", n)
	}
	if after, _ := os.ReadFile(kh); string(after) != string(pinned) {
		t.Fatalf("the redial changed the pinned host keys:\n%s\nvs\n%s", pinned, after)
	}

	// Cut off mid-command: the command's fate is unknown, so Run says so
	// (and does not run it twice); the next call works on a new connection.
	errc := make(chan error, 1)
	go func() {
		errc <- c.Run(ctx, remote.Command{Script: "echo x >> ran.txt; touch started; sleep 5"})
	}()
	waitFor(t, c, "test -f started && echo yes")
	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHDrop, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, remote.ErrConnectionLost) {
			t.Fatalf("run cut off by a drop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its connection dropped")
	}
	if out, err := c.Output(ctx, "wc -l < ran.txt"); err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("the cut-off command ran %q times (%v); want once", out, err)
	}

	// Copies survive a drop that lands on them (every transfer is redone whole).
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "data.bin"), []byte(strings.Repeat("d", 256<<10)), 0o644)
	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHDrop, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Upload(local, "up"); err != nil {
		t.Fatalf("upload after a drop: %v", err)
	}
	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHDrop, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "back.bin")
	if err := c.Download("up/data.bin", dst, 1<<20); err != nil {
		t.Fatalf("download after a drop: %v", err)
	}
	if b, _ := os.ReadFile(dst); len(b) != 256<<10 {
		t.Fatalf("downloaded %d bytes", len(b))
	}
	if err := c.Download("nope", dst, 10); !errors.Is(err, remote.ErrRemoteMissing) {
		t.Fatalf("a missing file is not a transport error: %v", err)
	}
}

// A stalled connection (nothing answered, nothing closed) is found dead by
// the keepalive and redialled, instead of hanging the call forever.
func TestRedialAfterStall(t *testing.T) {
	s, _, id, eps, kp, dir := instance(t)
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts"), KeepAlive: 100 * time.Millisecond}
	ctx := context.Background()
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Output(ctx, "true"); err != nil {
		t.Fatal(err)
	}
	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHStall, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var out string
	go func() { out, err = c.Output(ctx, "echo alive"); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("a call on a stalled connection never returned")
	}
	if err != nil || out != "alive\n" || c.Redials() != 1 {
		t.Fatalf("after a stall: %q %v, %d redials", out, err, c.Redials())
	}
}

// Scheduled drops (every N seconds of simulated time) land on live traffic.
func TestScheduledDrops(t *testing.T) {
	s, _, id, eps, kp, dir := instance(t)
	d := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}
	ctx := context.Background()
	c, err := d.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHDrop, Instance: int64(id), Seconds: 10, Count: 3}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if out, err := c.Output(ctx, "echo ok"); err != nil || out != "ok\n" {
			t.Fatalf("probe %d: %q %v", i, out, err)
		}
		if err := s.Advance(11 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Redials(); n != 3 {
		t.Fatalf("redials: %d, want 3 (Count)", n)
	}
}

func waitFor(t *testing.T, c *remote.Client, probe string) {
	t.Helper()
	for i := 0; ; i++ {
		if out, _ := c.Output(context.Background(), probe+"; true"); strings.TrimSpace(out) == "yes" {
			return
		}
		if i > 500 {
			t.Fatalf("never true: %s", probe)
		}
		time.Sleep(10 * time.Millisecond) // a real SSH server: real time
	}
}
