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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
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
}

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
			defer f.Close()
			_, err = fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key))
			return err
		case errors.As(err, &ke):
			return fmt.Errorf("%s: %w", hostname, ErrHostKeyChanged)
		}
		return err
	}
}

// Dial connects to the first endpoint that answers.
func (d Dialer) Dial(ctx context.Context, eps []Endpoint) (*Client, error) {
	if len(eps) == 0 {
		return nil, errors.New("ssh: the instance publishes no SSH endpoint")
	}
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
		c, err := dialOne(ctx, ep.String(), cfg, timeout)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrHostKeyChanged) {
			return nil, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	return nil, fmt.Errorf("ssh: %w", errors.Join(errs...))
}

func dialOne(ctx context.Context, addr string, cfg *ssh.ClientConfig, timeout time.Duration) (*Client, error) {
	var nd net.Dialer
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := nd.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The handshake is not context-aware: bound it with a deadline on the
	// connection, and close the connection if ctx ends first.
	deadline, _ := dctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	stopped := stop()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !stopped {
		sc.Close()
		return nil, ctx.Err()
	}
	conn.SetDeadline(time.Time{})
	return &Client{c: ssh.NewClient(sc, chans, reqs)}, nil
}

// Client is one SSH connection to an instance.
type Client struct {
	c *ssh.Client
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

// Command is something to run on the instance.
type Command struct {
	Script string            // run by /bin/sh in the login directory
	Env    map[string]string // exported before Script; may hold secrets
	Stdout io.Writer
	Stderr io.Writer
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
	fmt.Fprintf(&b, "exec /bin/sh -c %s\n", ShellQuote(cmd.Script))
	return b.String()
}

// Run runs cmd and waits. A non-zero exit is *ExitError. When ctx ends
// first, the job is sent SIGTERM (and killed through its pid file), the
// session is closed and ctx.Err() is returned.
func (c *Client) Run(ctx context.Context, cmd Command) error {
	sess, err := c.c.NewSession()
	if err != nil {
		return fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close()
	pidFile := ".vastrun/job-" + randomToken() + ".pid"
	sess.Stdin = strings.NewReader(cmd.script(pidFile))
	sess.Stdout = orDiscard(cmd.Stdout)
	sess.Stderr = orDiscard(cmd.Stderr)
	if err := sess.Start("/bin/sh -s"); err != nil {
		return fmt.Errorf("start remote command: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err := <-done:
		c.quiet(`rm -f ` + pidFile)
		return exitError(err)
	case <-ctx.Done():
		sess.Signal(ssh.SIGTERM) // refused for root by OpenSSH; the pid file covers that
		// TERM now, synchronously (one short session); the KILL a second
		// later runs detached on the instance, so a caller tearing down is
		// not held up by it.
		c.quiet(`p=$(cat ` + pidFile + ` 2>/dev/null); rm -f ` + pidFile + `; [ -n "$p" ] || exit 0; pkill -TERM -P "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; (sleep 1; pkill -KILL -P "$p"; kill -KILL "$p") >/dev/null 2>&1 </dev/null & true`)
		sess.Close()
		return ctx.Err()
	}
}

func randomToken() string {
	b := make([]byte, 6)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// quiet runs a housekeeping script on a fresh session, bounded in time.
func (c *Client) quiet(script string) {
	s, err := c.c.NewSession()
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{})
	go func() {
		s.Run(script)
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

// Output runs a script and returns its stdout.
func (c *Client) Output(ctx context.Context, script string) (string, error) {
	var out, errb strings.Builder
	err := c.Run(ctx, Command{Script: script, Stdout: &out, Stderr: &errb})
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) && errb.Len() > 0 {
			return out.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(lastLines(errb.String(), 3)))
		}
		return out.String(), err
	}
	return out.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Upload copies local files or directories to remote paths relative to
// the login directory.
func (c *Client) Upload(local, remote string) error {
	sc, err := sftp.NewClient(c.c)
	if err != nil {
		return fmt.Errorf("sftp: %w", err)
	}
	defer sc.Close()
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
		defer src.Close()
		f, err := sc.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return fmt.Errorf("sftp create %s: %w", dst, err)
		}
		if _, err := io.Copy(f, src); err != nil {
			f.Close()
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
func (c *Client) Download(remote, local string, limit int64) error {
	sc, err := sftp.NewClient(c.c)
	if err != nil {
		return fmt.Errorf("sftp: %w", err)
	}
	defer sc.Close()
	f, err := sc.Open(remote)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", remote, ErrRemoteMissing)
		}
		return fmt.Errorf("sftp open %s: %w", remote, err)
	}
	defer f.Close()
	out, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	n, err := io.Copy(out, io.LimitReader(f, limit+1))
	if err != nil {
		return fmt.Errorf("download %s: %w", remote, err)
	}
	if n > limit {
		return fmt.Errorf("download %s: larger than %d bytes", remote, limit)
	}
	return nil
}
