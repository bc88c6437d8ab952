package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/remote"
)

// serveEnv makes this test binary act as `vastrun agent heartbeat --serve`
// on the simulated instance: the real serve loop over real SSH.
const serveEnv = "VASTRUN_TEST_HEARTBEAT_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		wd, _ := os.Getwd()
		if err := agent.ServeHeartbeat(agent.Layout{Home: wd}, os.Stdin, os.Stdout, clock.Real{}); err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func serveScript(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return serveEnv + "=1 exec " + remote.ShellQuote(exe)
}

func heartbeater(c *remote.Client, script string, clk clock.Clock) *agent.Heartbeater {
	return &agent.Heartbeater{Every: 10 * time.Second, Retry: 2 * time.Second, Timeout: time.Hour, Clock: clk,
		Open: func(ctx context.Context) (agent.HeartbeatPipe, error) {
			s, err := c.Stream(ctx, script)
			if err != nil {
				return nil, err
			}
			return s, nil
		}}
}

// eventually reports whether cond holds within d of real time.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 6000 {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // a real SSH server: real time
	}
}

// The heartbeat channel over real SSH: every beat is a line on one session
// (one process on the instance, however many beats); an ssh_drop costs one
// failed beat and one redial, after which the beats resume and touch the
// heartbeat again.
func TestHeartbeatStreamSurvivesADropWithOneRedial(t *testing.T) {
	s, _, id, eps, kp, dir := instance(t)
	c, err := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}.Dial(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Each serve process appends a line: how many were started.
	script := "echo started >> serves.txt; " + serveScript(t)
	clk := clock.NewFake(time.Unix(1785300000, 0))
	h := heartbeater(c, script, clk)
	h.Start(context.Background())
	defer h.Stop()

	beats := func(n int) func() bool {
		return func() bool { st := h.Stats(); return st.Beats+st.Failed == n && clk.Waiters() == n+1 }
	}
	waitUntil(t, "beat 1", beats(1))
	for i := 2; i <= 4; i++ {
		clk.Advance(10 * time.Second)
		waitUntil(t, "beat "+strconv.Itoa(i), beats(i))
	}
	if st := h.Stats(); st.Beats != 4 || st.Sessions != 1 {
		t.Fatalf("four beats: %+v", st)
	}
	if out, err := c.Output(context.Background(), "wc -l < serves.txt"); err != nil || out != "1\n" {
		t.Fatalf("four beats started %q serve processes (%v); want 1", out, err)
	}

	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHDrop, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second) // meets the dropped session
	waitUntil(t, "the beat after the drop", beats(5))
	clk.Advance(2 * time.Second) // the retry redials
	waitUntil(t, "the retry", beats(6))
	clk.Advance(10 * time.Second)
	waitUntil(t, "the next beat", beats(7))
	st := h.Stop()
	if st.Beats != 6 || st.Failed != 1 || st.Sessions != 2 || c.Redials() != 1 {
		t.Fatalf("after one drop: %+v, %d redials; want 6 beats, 1 failure, 2 sessions, 1 redial", st, c.Redials())
	}
	out, err := c.Output(context.Background(), "wc -l < serves.txt; cat .vastrun/heartbeat >/dev/null && echo touched")
	if err != nil || out != "2\ntouched\n" {
		t.Fatalf("serve processes and heartbeat: %q %v", out, err)
	}
}

// A stalled connection does not hold the beats: the beat's deadline ends
// the wait, the silent session is closed, the connection's keepalive finds
// it dead, and the next beat redials.
func TestHeartbeatStreamRedialsAfterAStall(t *testing.T) {
	s, _, id, eps, kp, dir := instance(t)
	c, err := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts"), KeepAlive: 100 * time.Millisecond}.Dial(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clk := clock.NewFake(time.Unix(1785300000, 0))
	h := heartbeater(c, serveScript(t), clk)
	h.Timeout, h.Stall = 3*time.Second, 3*time.Second
	h.Start(context.Background())
	defer h.Stop()
	waitUntil(t, "beat 1", func() bool { return h.Stats().Beats == 1 && clk.Waiters() == 2 })

	if err := s.Inject(sim.Fault{Kind: sim.FaultSSHStall, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second) // beat 2 goes into the stall (beat 1's deadline fires, unheard)
	waitUntil(t, "beat 2 waits", func() bool { return clk.Waiters() == 1 })
	clk.Advance(3 * time.Second) // beat 2's deadline
	waitUntil(t, "beat 2 fails", func() bool { return h.Stats().Failed == 1 })
	if st := h.Stats(); !errors.Is(st.LastErr, agent.ErrBeatTimeout) {
		t.Fatalf("a stalled beat: %+v", st)
	}
	// The keepalive (real time) drops the stalled connection; the beats then
	// go on over a new one. Opening a session on a new connection is real
	// work, slow on a loaded machine, so the clock moves only between beats:
	// each advance wakes the wait after a beat, and the beat it starts gets
	// the real time it needs. Only a beat still unanswered after that (one
	// that hangs on the stalled connection) is ended by its deadline.
	done := func() int { st := h.Stats(); return st.Beats + st.Failed }
	for i := 0; h.Stats().Beats < 2; i++ {
		if i > 10 {
			t.Fatalf("the beats never resumed after the stall: %+v", h.Stats())
		}
		n := done()
		clk.Advance(h.Every) // past the wait after any beat: the next one starts
		if !eventually(20*time.Second, func() bool { return done() > n }) {
			clk.Advance(h.Timeout + h.Every) // its deadline, or a wait the advance above came too early for
			waitUntil(t, "a hung beat to end", func() bool { return done() > n })
		}
	}
	if c.Redials() != 1 {
		t.Fatalf("redials after a stall: %d, want 1", c.Redials())
	}
}

// The heartbeat channel against a real OpenSSH sshd (scripts/start-sshd.sh,
// run by .ci/run): beats are lines on one session, and closing it ends the
// serve process through EOF on its stdin, as a dropped connection does.
func TestOpenSSHHeartbeatStream(t *testing.T) {
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
	p, _ := strconv.Atoi(port)
	c, err := remote.Dialer{Key: signer, KnownHostsPath: filepath.Join(t.TempDir(), "known_hosts")}.Dial(context.Background(), []remote.Endpoint{{Host: host, Port: p}})
	if err != nil {
		t.Fatalf("dial OpenSSH: %v", err)
	}
	defer c.Close()
	work := fmt.Sprintf("vastrun-openssh-hb-%d", os.Getpid())
	t.Cleanup(func() { c.Output(context.Background(), "rm -rf "+work) })
	script := "mkdir -p " + work + " && cd " + work + " && echo $$ >> serves.pid && " + serveScript(t)

	clk := clock.NewFake(time.Unix(1785300000, 0))
	h := heartbeater(c, script, clk)
	h.Start(context.Background())
	beats := func(n int) func() bool {
		return func() bool { st := h.Stats(); return st.Beats == n && clk.Waiters() == n+1 }
	}
	waitUntil(t, "beat 1", beats(1))
	for i := 2; i <= 3; i++ {
		clk.Advance(10 * time.Second)
		waitUntil(t, "beat "+strconv.Itoa(i), beats(i))
	}
	st := h.Stop()
	if st.Beats != 3 || st.Failed != 0 || st.Sessions != 1 {
		t.Fatalf("three beats over OpenSSH: %+v", st)
	}
	out, err := c.Output(context.Background(), "cd "+work+" && wc -l < serves.pid && test -f .vastrun/heartbeat && echo touched")
	if err != nil || out != "1\ntouched\n" {
		t.Fatalf("one serve process and a touched heartbeat: %q %v", out, err)
	}
	waitUntil(t, "the serve process ends once its session is closed", func() bool {
		out, _ := c.Output(context.Background(), "kill -0 $(cat "+work+"/serves.pid) 2>/dev/null && echo alive; true")
		return out == ""
	})
}

// Closing a stream while another goroutine writes to it (the heartbeater
// closes a session in the background while a beat may be writing) is safe:
// x/crypto/ssh's EOF races a write on the same channel, so the stream
// serializes them (run under -race).
func TestStreamCloseWhileWriting(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	c, err := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}.Dial(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 20 {
		s, err := c.Stream(context.Background(), "cat > /dev/null")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := s.Write([]byte("beat\n")); err != nil {
					return
				}
			}
		}()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
	}
}

// A Run that ctx ends returns while the session may still be copying
// output: nothing reaches the caller's writers after Run returned (the
// caller reads them at once; run under -race).
func TestRunEndedByContextLeavesTheWritersAlone(t *testing.T) {
	_, _, _, eps, kp, dir := instance(t)
	c, err := remote.Dialer{Key: kp.Signer, KnownHostsPath: filepath.Join(dir, "known_hosts")}.Dial(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 5 {
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(200 * time.Millisecond) // a real SSH server: real time
			cancel()
		}()
		err := c.Run(ctx, remote.Command{Script: "yes output", Stdout: &out, Stderr: &errOut})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run: %v, want context.Canceled", err)
		}
		n := out.Len()
		out.Reset()
		if n == 0 {
			t.Fatal("no output before the cancel")
		}
	}
}
