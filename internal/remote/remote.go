// Package remote runs commands on, and copies files to and from, a rented
// instance over SSH (golang.org/x/crypto/ssh and pkg/sftp).
//
// Security contract:
//   - Each run has its own ed25519 key, written only inside the run's 0700
//     state directory.
//   - Host keys are pinned on first use in the run's known_hosts; a changed
//     key is refused.
//   - Environment values (which may be secrets) travel in the script sent
//     on stdin, never in a command line: they do not show up in argv on
//     either side, nor in any file on the instance.
package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/text"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Endpoint is a host:port where the instance's SSH answers.
type Endpoint struct {
	Host string
	Port int
}

func (e Endpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// KeyPair is a run's SSH identity.
type KeyPair struct {
	Signer        ssh.Signer
	AuthorizedKey string // "ssh-ed25519 AAAA... vastrun-RUN"
}

const keyFile = "id_ed25519"

// EnsureKeyPair loads the run's key from dir, or makes and saves one.
func EnsureKeyPair(dir, comment string) (KeyPair, error) {
	p := filepath.Join(dir, keyFile)
	if b, err := os.ReadFile(p); err == nil {
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return KeyPair{}, fmt.Errorf("read run key %s: %w", p, err)
		}
		return keyPair(signer, comment), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return KeyPair{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return KeyPair{}, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return KeyPair{}, err
	}
	if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
		return KeyPair{}, fmt.Errorf("write run key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return KeyPair{}, err
	}
	return keyPair(signer, comment), nil
}

func keyPair(s ssh.Signer, comment string) KeyPair {
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
	if comment != "" {
		line += " " + comment
	}
	return KeyPair{Signer: s, AuthorizedKey: line}
}

// Dialer opens SSH connections with a run's key and pinned host keys.
type Dialer struct {
	Key            ssh.Signer
	KnownHostsPath string
	User           string        // default root
	Timeout        time.Duration // per attempt; default 15s
	// Clock paces redials after a dropped connection (default: the wall clock).
	Clock clock.Clock
	// Redials is how many dials in a row a call may make after its
	// connection dropped before it gives up (default 6).
	Redials int
	// KeepAlive is how often a connection is probed; one that leaves a
	// probe unanswered for DeadAfter probes is closed as dead, so a stalled
	// session is redialled instead of hanging (default 15s; negative: off).
	// It is measured on the wall clock: it bounds a network peer's silence,
	// which is real time whatever the run's clock says.
	KeepAlive time.Duration
}

// DeadAfter is how many keepalive intervals a connection may leave a probe
// unanswered before it is closed as dead.
const DeadAfter = 3

// ErrHostKeyChanged means the instance presented a different host key than
// the one pinned earlier in this run.
var ErrHostKeyChanged = errors.New("host key changed since first use")

var knownHostsMu sync.Mutex

func (d Dialer) hostKeyCallback() ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		knownHostsMu.Lock()
		defer knownHostsMu.Unlock()
		if _, err := os.Stat(d.KnownHostsPath); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(d.KnownHostsPath, nil, 0o600); err != nil {
				return err
			}
		}
		cb, err := knownhosts.New(d.KnownHostsPath)
		if err != nil {
			return fmt.Errorf("read known hosts: %w", err)
		}
		err = cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ke) && len(ke.Want) == 0: // first use: pin it
			f, err := os.OpenFile(d.KnownHostsPath, os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key))
			// A write error may surface only at Close, and a pin that was
			// not saved pins nothing.
			return errors.Join(err, f.Close())
		case errors.As(err, &ke):
			return fmt.Errorf("%s: %w", hostname, ErrHostKeyChanged)
		}
		return err
	}
}

// Dial connects to the first endpoint that answers. The returned Client
// redials the same endpoints (with the same pinned host key) when its
// connection drops; see [Client].
func (d Dialer) Dial(ctx context.Context, eps []Endpoint) (*Client, error) {
	if len(eps) == 0 {
		return nil, errors.New("ssh: the instance publishes no SSH endpoint")
	}
	c := &Client{d: d, eps: append([]Endpoint(nil), eps...)}
	cn, err := d.dial(ctx, c.eps)
	if err != nil {
		return nil, err
	}
	c.cur = cn
	return c, nil
}

func (d Dialer) dial(ctx context.Context, eps []Endpoint) (*conn, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	user := d.User
	if user == "" {
		user = "root"
	}
	cfg := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(d.Key)}, HostKeyCallback: d.hostKeyCallback(), Timeout: timeout}
	var errs []error
	for _, ep := range eps {
		sc, err := dialOne(ctx, ep.String(), cfg, timeout)
		if err == nil {
			return newConn(sc, d.keepAlive()), nil
		}
		if errors.Is(err, ErrHostKeyChanged) {
			return nil, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	return nil, fmt.Errorf("ssh: %w", errors.Join(errs...))
}

func (d Dialer) keepAlive() time.Duration {
	if d.KeepAlive == 0 {
		return 15 * time.Second
	}
	return d.KeepAlive
}

func dialOne(ctx context.Context, addr string, cfg *ssh.ClientConfig, timeout time.Duration) (*ssh.Client, error) {
	var nd net.Dialer
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := nd.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The handshake is not context-aware: bound it with a deadline on the
	// connection, and close the connection if ctx ends first.
	deadline, _ := dctx.Deadline()
	nc.SetDeadline(deadline)                               //nolint:errcheck // on a closed connection the handshake fails and says so
	stop := context.AfterFunc(dctx, func() { nc.Close() }) //nolint:errcheck // cuts the handshake; its own error is reported
	sc, chans, reqs, err := ssh.NewClientConn(nc, addr, cfg)
	stopped := stop()
	if err != nil {
		nc.Close() //nolint:errcheck // the handshake error is the one to report
		return nil, err
	}
	if !stopped {
		sc.Close() //nolint:errcheck // ctx ended: ctx.Err() is reported
		return nil, ctx.Err()
	}
	nc.SetDeadline(time.Time{}) //nolint:errcheck // a failed reset shows as a timeout on the next call
	return ssh.NewClient(sc, chans, reqs), nil
}

// conn is one SSH connection; dead closes when it is gone.
type conn struct {
	c    *ssh.Client
	dead chan struct{}
	stop chan struct{}
	once sync.Once
}

func newConn(c *ssh.Client, keepAlive time.Duration) *conn {
	cn := &conn{c: c, dead: make(chan struct{}), stop: make(chan struct{})}
	go func() { c.Wait(); close(cn.dead) }() //nolint:errcheck // Wait only says the connection ended; dead says that
	if keepAlive > 0 {
		go cn.keepAlive(keepAlive)
	}
	return cn
}

// keepAlive probes the peer every interval and closes the connection when
// a probe goes unanswered for DeadAfter intervals: a stalled peer (a dead
// NAT entry, a hung host) then fails every pending call instead of hanging it.
func (cn *conn) keepAlive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-cn.stop:
			return
		case <-cn.dead:
			return
		case <-t.C:
		}
		answered := make(chan struct{})
		go func() {
			// Any reply, even "unsupported", proves the peer is alive.
			cn.c.SendRequest("keepalive@openssh.com", true, nil) //nolint:errcheck // a probe that fails is as unanswered as one that stalls
			close(answered)
		}()
		timer := time.NewTimer(DeadAfter * interval)
		select {
		case <-answered:
			timer.Stop()
		case <-cn.stop:
			timer.Stop()
			return
		case <-timer.C:
			cn.close()
			return
		}
	}
}

func (cn *conn) close() {
	cn.once.Do(func() { close(cn.stop) })
	cn.c.Close() //nolint:errcheck // the connection is dropped either way
}

func (cn *conn) isDead() bool {
	select {
	case <-cn.dead:
		return true
	default:
		return false
	}
}

// alive asks the peer for a reply within timeout: it tells a failed call on
// a live connection (a permanent error) from one whose connection is gone.
func (cn *conn) alive(timeout time.Duration) bool {
	if cn.isDead() {
		return false
	}
	ok := make(chan bool, 1)
	go func() {
		_, _, err := cn.c.SendRequest("keepalive@openssh.com", true, nil)
		ok <- err == nil
	}()
	select {
	case v := <-ok:
		return v
	case <-cn.dead:
		return false
	case <-time.After(timeout):
		return false
	}
}

// ErrConnectionLost means the SSH connection dropped while a command was
// running, so whether it finished is unknown. The Client redials for the
// next call; the caller decides whether the command may be run again.
var ErrConnectionLost = errors.New("ssh connection lost while the command ran")

// ErrRedialFailed means the connection dropped and could not be dialled
// again: the instance may be gone, or its SSH down for longer than the
// redial backoff lasts.
var ErrRedialFailed = errors.New("ssh redial failed")

// Lost reports whether err is a transport failure of a Client (the
// connection dropped mid-command, or could not be redialled), as opposed to
// a command that ran and failed.
func Lost(err error) bool {
	return errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrRedialFailed)
}

// ErrClosed means the Client was closed.
var ErrClosed = errors.New("ssh client closed")

// Client runs commands on one instance over SSH. It redials when its
// connection drops (or stalls: see [Dialer.KeepAlive]), with backoff on
// [Dialer.Clock] and the same pinned host key:
//
//   - a call that failed before its command could have started (no session,
//     the exec request unanswered) is made again on the new connection;
//   - [Client.Output], [Client.Upload] and [Client.Download] are made again
//     after any transport failure: Output is for probes that may run twice,
//     and file copies overwrite;
//   - [Client.Run] whose connection dropped after the command started
//     returns an error wrapping [ErrConnectionLost]; the next call redials.
//
// A command that ran and exited non-zero is an *ExitError, never retried.
// It is safe for concurrent use.
type Client struct {
	d   Dialer
	eps []Endpoint

	mu      sync.Mutex
	cur     *conn
	closed  bool
	redials int
}

// Close closes the connection; later calls fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cur == nil {
		return nil
	}
	cn := c.cur
	c.cur = nil
	cn.close()
	return nil
}

// Redials is how many times the connection was re-established.
func (c *Client) Redials() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.redials
}

// conn returns a live connection, redialling (with backoff) when the
// current one is gone.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cur != nil && !c.cur.isDead() {
		return c.cur, nil
	}
	if c.cur != nil {
		c.cur.close()
		c.cur = nil
	}
	clk := c.d.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	tries := c.d.Redials
	if tries <= 0 {
		tries = 6
	}
	wait := 500 * time.Millisecond
	var last error
	for i := 0; i < tries; i++ {
		if i > 0 {
			if err := clock.Sleep(ctx, clk, wait); err != nil {
				return nil, fmt.Errorf("ssh redial: %w (last: %v)", err, last) //nolint:errorlint // the class is the cancellation; the last dial's error is context only
			}
			wait = min(wait*2, 10*time.Second)
		}
		cn, err := c.d.dial(ctx, c.eps)
		if err == nil {
			c.cur = cn
			c.redials++
			return cn, nil
		}
		last = err
		if errors.Is(err, ErrHostKeyChanged) || ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: %d dials failed: %w", ErrRedialFailed, tries, last)
}

// drop discards cn if it is still the current connection.
func (c *Client) drop(cn *conn) {
	c.mu.Lock()
	if c.cur == cn {
		c.cur = nil
	}
	c.mu.Unlock()
	cn.close()
}

// retry runs op on a live connection until it succeeds, fails permanently,
// or the redials are spent. op reports whether its failure may be retried.
func (c *Client) retry(ctx context.Context, op func(*conn) (retry bool, err error)) error {
	tries := c.d.Redials
	if tries <= 0 {
		tries = 6
	}
	var last error
	for i := 0; i <= tries; i++ {
		cn, err := c.conn(ctx)
		if err != nil {
			if last != nil {
				return fmt.Errorf("%w (after: %v)", err, last) //nolint:errorlint // the class is why no connection is left; the earlier failure is context only
			}
			return err
		}
		again, err := op(cn)
		if err == nil || !again || ctx.Err() != nil {
			return err
		}
		last = err
		c.drop(cn)
	}
	return last
}

// transport reports whether err from a call on cn came from the connection
// rather than from the remote side answering.
func transport(cn *conn, err error) bool {
	return err != nil && !cn.alive(5*time.Second)
}

// Command is something to run on the instance.
type Command struct {
	Script string            // run by /bin/sh in the login directory
	Env    map[string]string // exported before Script; may hold secrets
	// Stdin, when set, is Script's standard input: text (no NUL byte), it
	// arrives ending in a newline. It travels inside the script the shell
	// reads from the session, as a here-document, never in a command line.
	Stdin  []byte
	Stdout io.Writer
	Stderr io.Writer
	// Output, when set, receives the command's stdout and stderr as one
	// stream, joined on the instance (2>&1): one pipe, so a log holds the
	// lines in the order the program wrote them, which two SSH channels
	// copied into one writer do not keep. Stdout and Stderr are then unused.
	Output io.Writer
}

// ExitError reports a command that ran and exited non-zero (or by signal).
type ExitError struct {
	Code   int
	Signal string
}

func (e *ExitError) Error() string {
	if e.Signal != "" {
		return fmt.Sprintf("remote command killed by signal %s", e.Signal)
	}
	return fmt.Sprintf("remote command exited with status %d", e.Code)
}

// ShellQuote quotes s for POSIX sh.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// script builds what /bin/sh -s reads from stdin: the environment, a pid
// file so a later session can signal the job, then the command.
func (cmd Command) script(pidFile string) string {
	var b strings.Builder
	keys := make([]string, 0, len(cmd.Env))
	for k := range cmd.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, ShellQuote(cmd.Env[k]))
	}
	fmt.Fprintf(&b, "mkdir -p .vastrun && echo $$ > %s\n", pidFile)
	joined := ""
	if cmd.Output != nil {
		joined = " 2>&1"
	}
	if cmd.Stdin == nil {
		fmt.Fprintf(&b, "exec /bin/sh -c %s%s\n", ShellQuote(cmd.Script), joined)
		return b.String()
	}
	// A quoted delimiter keeps the document literal; a random one that no
	// line of it equals ends it exactly there.
	end := hereEnd(cmd.Stdin)
	fmt.Fprintf(&b, "exec /bin/sh -c %s%s <<'%s'\n", ShellQuote(cmd.Script), joined, end)
	b.Write(cmd.Stdin)
	if !bytes.HasSuffix(cmd.Stdin, []byte("\n")) {
		b.WriteByte('\n')
	}
	b.WriteString(end + "\n")
	return b.String()
}

// hereEnd is a here-document delimiter that no line of doc equals.
func hereEnd(doc []byte) string {
	for {
		end := "VASTRUN_STDIN_" + randomToken()
		if !slices.Contains(strings.Split(string(doc), "\n"), end) {
			return end
		}
	}
}

// ErrBinaryStdin: a command's Stdin holds a NUL byte, which a shell
// script cannot carry.
var ErrBinaryStdin = errors.New("remote command: stdin holds a NUL byte")

// Run runs cmd and waits. A non-zero exit is *ExitError. When ctx ends
// first, the job is sent SIGTERM (and killed through its pid file), the
// session is closed and ctx.Err() is returned. A dropped connection is
// handled as [Client] describes.
func (c *Client) Run(ctx context.Context, cmd Command) error {
	if bytes.IndexByte(cmd.Stdin, 0) >= 0 {
		return ErrBinaryStdin
	}
	return c.retry(ctx, func(cn *conn) (bool, error) {
		started, err := c.runOn(ctx, cn, cmd)
		if err == nil || ctx.Err() != nil {
			return false, err
		}
		var ee *ExitError
		if errors.As(err, &ee) {
			return false, err
		}
		if !started {
			return true, err // nothing ran: safe to start it on a new connection
		}
		if transport(cn, err) {
			c.drop(cn)
			return false, fmt.Errorf("%w: %w", ErrConnectionLost, err)
		}
		return false, err
	})
}

// runOn runs cmd on cn; started says whether the command may have run.
func (c *Client) runOn(ctx context.Context, cn *conn, cmd Command) (started bool, err error) {
	sess, err := cn.c.NewSession()
	if err != nil {
		return false, fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close() //nolint:errcheck // teardown: the session's own result is what counts
	pidFile := ".vastrun/job-" + randomToken() + ".pid"
	sess.Stdin = strings.NewReader(cmd.script(pidFile))
	// The session copies output in goroutines of its own, which may still
	// be writing when ctx ends and runOn returns: the gate stops them
	// reaching the caller's writers once runOn has returned.
	gate := &outputGate{}
	defer gate.shut()
	stdout, stderr := gate.to(orDiscard(cmd.Stdout)), gate.to(orDiscard(cmd.Stderr))
	if cmd.Output != nil {
		// The command's own stderr arrives on stdout; what the wrapper
		// shell says before it execs it still comes on stderr, into the
		// same writer, one write at a time.
		stdout = gate.to(cmd.Output)
		stderr = stdout
	}
	sess.Stdout, sess.Stderr = stdout, stderr
	// Start returns once the exec request is answered, before stdin (the
	// script) is sent: if it fails, the shell has read nothing to run.
	if err := sess.Start("/bin/sh -s"); err != nil {
		return false, fmt.Errorf("start remote command: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err := <-done:
		quiet(cn, `rm -f `+pidFile)
		return true, exitError(err)
	case <-ctx.Done():
		sess.Signal(ssh.SIGTERM) //nolint:errcheck // refused for root by OpenSSH; the pid file covers that
		// TERM now, synchronously (one short session); the KILL a second
		// later runs detached on the instance, so a caller tearing down is
		// not held up by it.
		quiet(cn, `p=$(cat `+pidFile+` 2>/dev/null); rm -f `+pidFile+`; [ -n "$p" ] || exit 0; pkill -TERM -P "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; (sleep 1; pkill -KILL -P "$p"; kill -KILL "$p") >/dev/null 2>&1 </dev/null & true`)
		sess.Close() //nolint:errcheck // teardown: the session's own result is what counts
		return true, ctx.Err()
	}
}

func randomToken() string {
	b := make([]byte, 6)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// quiet runs a housekeeping script on a fresh session, bounded in time.
func quiet(cn *conn, script string) {
	s, err := cn.c.NewSession()
	if err != nil {
		return
	}
	defer s.Close() //nolint:errcheck // housekeeping session
	done := make(chan struct{})
	go func() {
		s.Run(script) //nolint:errcheck // housekeeping is best effort: the caller has its answer already
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
}

func exitError(err error) error {
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Code: ee.ExitStatus(), Signal: ee.Signal()}
	}
	var missing *ssh.ExitMissingError
	if errors.As(err, &missing) {
		return fmt.Errorf("remote command ended without an exit status (connection lost?): %w", err)
	}
	return err
}

// Output runs a script and returns its stdout. It is for probes: a script
// whose connection dropped is run again on a new one, so it must be safe to
// run twice.
func (c *Client) Output(ctx context.Context, script string) (string, error) {
	var out string
	err := c.retry(ctx, func(cn *conn) (bool, error) {
		var o, errb strings.Builder
		_, err := c.runOn(ctx, cn, Command{Script: script, Stdout: &o, Stderr: &errb})
		out = o.String()
		if err == nil || ctx.Err() != nil {
			return false, err
		}
		var ee *ExitError
		if errors.As(err, &ee) {
			if errb.Len() > 0 {
				return false, fmt.Errorf("%w: %s", err, strings.TrimSpace(text.LastLines(errb.String(), 3)))
			}
			return false, err
		}
		return transport(cn, err), err
	})
	return out, err
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Upload copies local files or directories to remote paths relative to
// the login directory.
// A copy cut off by a dropped connection is made again, whole.
func (c *Client) Upload(local, remote string) error {
	return c.UploadProgress(local, remote, nil)
}

// UploadProgress is Upload that reports, after each chunk written, the
// bytes this try has copied so far. A try redialled after a dropped
// connection copies again from the start, so the count starts again at 0.
func (c *Client) UploadProgress(local, remote string, progress func(copied int64)) error {
	return c.UploadContext(context.Background(), local, remote, progress)
}

// UploadContext is UploadProgress that ends when ctx does: the copy in
// flight is cut off (its SFTP client closed) and ctx's error returned, so
// a caller bounded in time (a budget's moment) is not held by a slow copy.
func (c *Client) UploadContext(ctx context.Context, local, remote string, progress func(copied int64)) error {
	return c.retry(ctx, func(cn *conn) (bool, error) {
		err := upload(ctx, cn, local, remote, progress)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return transport(cn, err), err
	})
}

// countingReader reports the running total read through it.
type countingReader struct {
	r     io.Reader
	total *int64
	fn    func(int64)
}

func (cr countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	if n > 0 && cr.fn != nil {
		*cr.total += int64(n)
		cr.fn(*cr.total)
	}
	return n, err
}

func upload(ctx context.Context, cn *conn, local, remote string, progress func(int64)) error {
	var copied int64
	sc, err := sftp.NewClient(cn.c)
	if err != nil {
		return fmt.Errorf("sftp: %w", err)
	}
	defer sc.Close()                                      //nolint:errcheck // the copy's own error is reported
	defer context.AfterFunc(ctx, func() { sc.Close() })() //nolint:errcheck // cuts the copy when ctx ends; the copy reports it
	return filepath.Walk(local, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		dst := path.Join(remote, filepath.ToSlash(rel))
		if info.IsDir() {
			return sc.MkdirAll(dst)
		}
		if dir := path.Dir(dst); dir != "." {
			if err := sc.MkdirAll(dir); err != nil {
				return fmt.Errorf("sftp mkdir %s: %w", dir, err)
			}
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close() //nolint:errcheck // read-only file
		f, err := sc.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return fmt.Errorf("sftp create %s: %w", dst, err)
		}
		if _, err := io.Copy(f, countingReader{r: src, total: &copied, fn: progress}); err != nil {
			f.Close() //nolint:errcheck // the copy error is the one to report
			return fmt.Errorf("upload %s: %w", dst, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
		return sc.Chmod(dst, info.Mode().Perm())
	})
}

// ErrRemoteMissing means the remote file does not exist.
var ErrRemoteMissing = errors.New("remote file does not exist")

// Download copies one remote file (relative to the login directory) to a
// local path, at most limit bytes.
// A copy cut off by a dropped connection is made again, whole.
func (c *Client) Download(remote, local string, limit int64) error {
	return c.retry(context.Background(), func(cn *conn) (bool, error) {
		err := download(cn, remote, local, limit)
		if errors.Is(err, ErrRemoteMissing) {
			return false, err
		}
		return transport(cn, err), err
	})
}

// ReadFile reads one remote file (relative to the login directory) into
// memory, at most limit bytes: what is read this way never lies on this
// machine's disk (a result that may hold a secret, read to be masked).
// A read cut off by a dropped connection is made again, whole.
func (c *Client) ReadFile(remote string, limit int64) ([]byte, error) {
	var out []byte
	err := c.retry(context.Background(), func(cn *conn) (bool, error) {
		b, err := readFile(cn, remote, limit)
		if errors.Is(err, ErrRemoteMissing) {
			return false, err
		}
		out = b
		return transport(cn, err), err
	})
	return out, err
}

func readFile(cn *conn, remote string, limit int64) ([]byte, error) {
	sc, err := sftp.NewClient(cn.c)
	if err != nil {
		return nil, fmt.Errorf("sftp: %w", err)
	}
	defer sc.Close() //nolint:errcheck // read side: the read's own error is reported
	f, err := sc.Open(remote)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", remote, ErrRemoteMissing)
		}
		return nil, fmt.Errorf("sftp open %s: %w", remote, err)
	}
	defer f.Close() //nolint:errcheck // read-only remote file
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", remote, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: larger than %d bytes", remote, limit)
	}
	return b, nil
}

func download(cn *conn, remote, local string, limit int64) error {
	sc, err := sftp.NewClient(cn.c)
	if err != nil {
		return fmt.Errorf("sftp: %w", err)
	}
	defer sc.Close() //nolint:errcheck // read side: the copy's own error is reported
	f, err := sc.Open(remote)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", remote, ErrRemoteMissing)
		}
		return fmt.Errorf("sftp open %s: %w", remote, err)
	}
	defer f.Close() //nolint:errcheck // read-only remote file
	out, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(f, limit+1))
	// A write error may surface only at Close.
	if err = errors.Join(err, out.Close()); err != nil {
		return fmt.Errorf("download %s: %w", remote, err)
	}
	if n > limit {
		return fmt.Errorf("download %s: larger than %d bytes", remote, limit)
	}
	return nil
}

// Stream is a long-lived remote command the caller talks to over its
// stdin and stdout (the agent's heartbeat channel). It reads the command's
// stdout and writes its stdin; stderr is discarded.
type Stream struct {
	c      *Client
	cn     *conn
	sess   *ssh.Session
	stdin  io.WriteCloser
	stdout io.Reader
	stop   func() bool
	once   sync.Once
	// wmu serializes writes with the EOF that ends them: x/crypto/ssh's
	// CloseWrite races a Write on the same channel.
	wmu sync.Mutex
}

// Stream starts script on a live connection (redialling, as every call does,
// when the connection is gone) and returns once the command has started.
// The session ends with ctx, or with Close. Opening is bounded by ctx; a
// stalled connection is found dead by its keepalive and the next call
// redials.
func (c *Client) Stream(ctx context.Context, script string) (*Stream, error) {
	var st *Stream
	err := c.retry(ctx, func(cn *conn) (bool, error) {
		s, err := c.openStream(ctx, cn, script)
		if err != nil {
			// Nothing ran unless the start was answered: safe to try again
			// on a new connection when this one is gone.
			return ctx.Err() == nil && transport(cn, err), err
		}
		st = s
		return false, nil
	})
	return st, err
}

func (c *Client) openStream(ctx context.Context, cn *conn, script string) (*Stream, error) {
	type res struct {
		s   *Stream
		err error
	}
	ch := make(chan res, 1)
	go func() {
		sess, err := cn.c.NewSession()
		if err != nil {
			ch <- res{nil, fmt.Errorf("ssh session: %w", err)}
			return
		}
		stdin, err := sess.StdinPipe()
		if err != nil {
			sess.Close() //nolint:errcheck // the start error is the one to report
			ch <- res{nil, err}
			return
		}
		stdout, err := sess.StdoutPipe()
		if err != nil {
			sess.Close() //nolint:errcheck // the start error is the one to report
			ch <- res{nil, err}
			return
		}
		sess.Stderr = io.Discard
		// The command line is the script itself: stdin is the command's own
		// input here, so unlike Run no environment (no secret) travels.
		if err := sess.Start(script); err != nil {
			sess.Close() //nolint:errcheck // the start error is the one to report
			ch <- res{nil, fmt.Errorf("start remote command: %w", err)}
			return
		}
		ch <- res{&Stream{c: c, cn: cn, sess: sess, stdin: stdin, stdout: stdout}, nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		// The callback runs at once, in its own goroutine, when ctx ended
		// while the start was answered: it only ends the session and never
		// reads stop, which is written here.
		r.s.stop = context.AfterFunc(ctx, r.s.end)
		return r.s, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.s != nil {
				r.s.sess.Close() //nolint:errcheck // a start answered after ctx ended: nobody waits for it
			}
		}()
		// The connection itself is left to its keepalive (Dialer.KeepAlive):
		// one slow session request on a busy machine is no proof it is dead,
		// and dropping it would cut every call on it.
		return nil, ctx.Err()
	}
}

// Read reads the command's stdout.
func (s *Stream) Read(p []byte) (int, error) { return s.stdout.Read(p) }

// Write writes the command's stdin.
func (s *Stream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.stdin.Write(p)
}

// Close ends the session: the command's stdin is closed, then the session.
func (s *Stream) Close() error {
	if s.stop != nil {
		s.stop()
	}
	s.end()
	return nil
}

func (s *Stream) end() {
	s.once.Do(func() {
		// The EOF goes only when no write is in flight; a write hanging on
		// a stalled connection is ended by closing the session instead,
		// never waited for.
		if s.wmu.TryLock() {
			s.stdin.Close() //nolint:errcheck // closing the stream: its commands' answers were read already
			s.wmu.Unlock()
		}
		s.sess.Close() //nolint:errcheck // closing the stream: its commands' answers were read already
	})
}

// outputGate serializes the writes of a session's output goroutines
// into the caller's writers (one write at a time, whichever stream it
// comes from) and, once shut, drops them: a session's copies can outlive
// the call that started it.
type outputGate struct {
	mu     sync.Mutex
	closed bool
}

// to is w behind the lock.
func (l *outputGate) to(w io.Writer) io.Writer { return gatedWriter{l, w} }

// shut drops every later write; it returns once none is in flight.
func (l *outputGate) shut() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

type gatedWriter struct {
	l *outputGate
	w io.Writer
}

func (g gatedWriter) Write(p []byte) (int, error) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if g.l.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

// DialWithin is Dial with the first connection bounded by timeout instead
// of d.Timeout (a readiness probe, which must not wait long on a host that
// is not up yet); the Client's later redials use d.Timeout.
func (d Dialer) DialWithin(ctx context.Context, eps []Endpoint, timeout time.Duration) (*Client, error) {
	first := d
	first.Timeout = timeout
	c, err := first.Dial(ctx, eps)
	if err != nil {
		return nil, err
	}
	c.d = d
	return c, nil
}
