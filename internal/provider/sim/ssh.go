package sim

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/pkg/sftp"
	gossh "golang.org/x/crypto/ssh"

	"github.com/vastrun/vastrun/internal/clock"
)

func parseAuthorizedKey(text string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(text)))
	return k, err
}

// sshState tracks an instance's live connections and processes so that
// stop, preemption and destroy can cut them off as a real host would.
type sshState struct {
	mu    sync.Mutex
	conns map[net.Conn]bool
	pgids map[int]bool
}

func stateOf(in *instance) *sshState {
	in.sshMu.Lock()
	defer in.sshMu.Unlock()
	if in.sessions == nil {
		in.sessions = &sshState{conns: map[net.Conn]bool{}, pgids: map[int]bool{}}
	}
	return in.sessions
}

// killSessions kills the instance's processes and drops its connections.
// It never takes s.mu, so callers may hold it.
func (s *Server) killSessions(in *instance) {
	st := stateOf(in)
	st.mu.Lock()
	var conns []net.Conn
	for c := range st.conns {
		conns = append(conns, c)
	}
	for pgid := range st.pgids {
		syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck // the process may have exited already; nothing else to do
	}
	st.mu.Unlock()
	for _, c := range conns { // Close takes st.mu itself
		c.Close() //nolint:errcheck // dropping the connection is the point; its Close error changes nothing
	}
	killSandboxProcesses(in.sandbox)
	if in.box != nil {
		in.box.killAll()
	}
}

// killSandboxProcesses kills every process whose working directory is in
// the sandbox, as stopping a container kills everything in it, including
// jobs started with setsid/nohup that left the session's process group.
func killSandboxProcesses(sandbox string) {
	if sandbox == "" {
		return
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil {
			continue
		}
		if cwd == sandbox || strings.HasPrefix(cwd, sandbox+"/") {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // the process may have exited already; nothing else to do
		}
	}
}

// sshAllowed decides, per connection, whether the instance answers SSH.
func (s *Server) sshAllowed(in *instance) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advance(in)
	if !in.running() {
		return false
	}
	if in.stopAtSSH {
		in.stopAtSSH = false
		in.setState(now, "stopped", "stopped", "stopped", "stopped", "stopped by the host")
		s.killSessions(in)
		return false
	}
	if now.Before(in.sshRefuseUntil) {
		return false
	}
	if in.sshRefuseConns > 0 {
		in.sshRefuseConns--
		return false
	}
	return true
}

// gatedListener closes connections the instance would refuse, before any
// SSH bytes are exchanged: the client sees the connection dropped.
type gatedListener struct {
	net.Listener
	allow func() bool
	st    *sshState
	srv   *Server
	in    *instance
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.allow() {
			c.Close() //nolint:errcheck // refusing the connection is the point
			continue
		}
		tc := &trackedConn{Conn: c, st: l.st, srv: l.srv, in: l.in}
		l.st.mu.Lock()
		l.st.conns[tc] = true
		l.st.mu.Unlock()
		return tc, nil
	}
}

type trackedConn struct {
	net.Conn
	st      *sshState
	srv     *Server
	in      *instance
	once    sync.Once
	stalled atomic.Bool // ssh_stall: nothing is processed any more
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.st.mu.Lock()
		delete(c.st.conns, c)
		c.st.mu.Unlock()
	})
	return c.Conn.Close()
}

// startSSH opens the instance's SSH port on 127.0.0.1. It serves only while
// the instance is running.
func (s *Server) startSSH(in *instance) error {
	if s.cfg.DisableSSH {
		return nil
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for instance %d SSH: %w", in.ID, err)
	}
	st := stateOf(in)
	srv := &ssh.Server{
		Handler:          s.sessionHandler(in),
		PublicKeyHandler: func(ctx ssh.Context, key ssh.PublicKey) bool { return s.keyAuthorized(in, key) },
		// Port forwarding (-L) reaches the instance's own loopback only.
		ChannelHandlers:             map[string]ssh.ChannelHandler{"session": ssh.DefaultSessionHandler, "direct-tcpip": ssh.DirectTCPIPHandler},
		LocalPortForwardingCallback: forwardAllowed,
		SubsystemHandlers: map[string]ssh.SubsystemHandler{
			"sftp": func(sess ssh.Session) {
				srv, err := sftp.NewServer(sess, sftp.WithServerWorkingDirectory(in.workspace()))
				if err != nil {
					return
				}
				if err := srv.Serve(); errors.Is(err, io.EOF) {
					srv.Close() //nolint:errcheck // the session ends either way
				}
			},
		},
	}
	srv.AddHostKey(signer)
	in.sshMu.Lock()
	in.sshPort = ln.Addr().(*net.TCPAddr).Port
	in.ln = ln
	in.closeFn = func() {
		srv.Close() //nolint:errcheck // teardown: the instance is going away
		ln.Close()  //nolint:errcheck // teardown: the instance is going away
		s.killSessions(in)
	}
	in.sshMu.Unlock()
	go srv.Serve(&gatedListener{Listener: ln, allow: func() bool { return s.sshAllowed(in) }, st: st, srv: s, in: in}) //nolint:errcheck // Serve returns when closeFn closes the listener
	return nil
}

// keyAuthorized accepts keys attached to this instance or registered on the
// account.
func (s *Server) keyAuthorized(in *instance, key ssh.PublicKey) bool {
	s.mu.Lock()
	texts := append([]string(nil), in.AttachedKeys...)
	for _, k := range s.acctSSHKeys {
		texts = append(texts, k.PublicKey)
	}
	s.mu.Unlock()
	for _, t := range texts {
		if k, err := parseAuthorizedKey(t); err == nil && ssh.KeysEqual(k, key) {
			return true
		}
	}
	return false
}

func (s *Server) sessionEnv(in *instance, fromClient []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.sshMu.Lock()
	port := in.sshPort
	in.sshMu.Unlock()
	env := []string{
		"PATH=" + in.sandbox + "/.sim/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + in.sandbox + "/root",
		"USER=root", "LOGNAME=root", "SHELL=/bin/sh", "LANG=C.UTF-8",
		"CONTAINER_ID=" + strconv.FormatInt(in.ID, 10),
		"CONTAINER_API_KEY=" + in.APIKey,
		"VAST_CONTAINERLABEL=C." + strconv.FormatInt(in.ID, 10),
		"PUBLIC_IPADDR=127.0.0.1",
		"VAST_TCP_PORT_22=" + strconv.Itoa(port),
	}
	if v := s.clockSpeed(); v != "" {
		env = append(env, ClockSpeedEnv+"="+v)
	}
	for _, kv := range in.Env {
		if !strings.HasPrefix(kv[0], "-") {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return append(env, fromClient...)
}

var sshSignals = map[ssh.Signal]syscall.Signal{
	ssh.SIGINT: syscall.SIGINT, ssh.SIGTERM: syscall.SIGTERM, ssh.SIGKILL: syscall.SIGKILL,
	ssh.SIGHUP: syscall.SIGHUP, ssh.SIGQUIT: syscall.SIGQUIT, ssh.SIGUSR1: syscall.SIGUSR1, ssh.SIGUSR2: syscall.SIGUSR2,
}

// sessionHandler runs the client's command with sh -c in the instance's
// workspace, in its own process group so that signals reach the whole tree.
func (s *Server) sessionHandler(in *instance) ssh.Handler {
	return func(sess ssh.Session) {
		var cmd *exec.Cmd
		var pidFile string // image path: where the shell in the container wrote its pid
		envDone := func() {}
		raw := sess.RawCommand()
		if b := in.box; b != nil {
			req, _, tty := sess.Pty()
			var err error
			cmd, pidFile, envDone, err = b.sessionCmd(in, raw, s.sessionEnv(in, sess.Environ()), req.Term, tty)
			if err != nil {
				fmt.Fprintf(sess.Stderr(), "sh: %v\n", err) //nolint:errcheck // the session's stderr is the only place to tell
				sess.Exit(255)                              //nolint:errcheck // the session ends either way
				return
			}
		} else {
			if raw != "" {
				cmd = exec.Command("/bin/sh", "-c", raw)
			} else {
				cmd = exec.Command("/bin/sh")
			}
			cmd.Dir = in.workspace()
			cmd.Env = s.sessionEnv(in, sess.Environ())
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.WaitDelay = 2 * time.Second // a background child must not hold the session open forever
		drain, err := startSession(sess, cmd)
		if pidFile != "" {
			defer os.Remove(pidFile) //nolint:errcheck // the pid file is only read while the session lives
		}
		defer envDone()
		if err != nil {
			fmt.Fprintf(sess.Stderr(), "sh: %v\n", err) //nolint:errcheck // the session's stderr is the only place to tell
			sess.Exit(127)                              //nolint:errcheck // the session ends either way
			return
		}
		pgid := cmd.Process.Pid
		st := stateOf(in)
		st.mu.Lock()
		st.pgids[pgid] = true
		st.mu.Unlock()

		sigs := make(chan ssh.Signal, 8)
		done := make(chan struct{})
		sess.Signals(sigs)
		go func() {
			for {
				select {
				case sig := <-sigs:
					if ss, ok := sshSignals[sig]; ok {
						if in.box != nil {
							in.box.signal(pidFile, ss)
						} else {
							syscall.Kill(-pgid, ss) //nolint:errcheck // the process may have exited already; nothing else to do
						}
					}
				case <-done:
					return
				}
			}
		}()
		err = cmd.Wait()
		drain()
		sess.Signals(nil)
		close(done)
		st.mu.Lock()
		delete(st.pgids, pgid)
		st.mu.Unlock()

		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			} else {
				code = ee.ExitCode()
			}
		case err != nil && cmd.ProcessState != nil:
			code = cmd.ProcessState.ExitCode()
		case err != nil:
			code = 255
		}
		sess.Exit(code) //nolint:errcheck // the client going away is its own report
	}
}

// ClockSpeedEnv tells an instance's processes how many simulated seconds
// pass per wall second, when the simulator runs on a scaled clock. It is a
// simulator-only variable (Vast sets nothing like it): the on-instance
// dead-man switch counts its TTL in simulated time with it, as the
// simulator bills, and honours it only when its API is on a loopback
// address (internal/agent, SimClockSpeed).
const ClockSpeedEnv = "VASTRUN_SIM_CLOCK_SPEED"

// clockSpeed is ClockSpeedEnv's value: "" on an unscaled clock.
func (s *Server) clockSpeed() string {
	if sc, ok := s.clock.(*clock.Scaled); ok && sc.Factor > 1 {
		return strconv.FormatFloat(sc.Factor, 'g', -1, 64)
	}
	return ""
}
