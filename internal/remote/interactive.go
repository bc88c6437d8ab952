package remote

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/crypto/ssh"
)

// SessionOptions describe an interactive session (vastrun ssh).
type SessionOptions struct {
	// Command runs by the login shell; empty opens the shell itself.
	Command string
	// PTY asks the instance for a pseudo-terminal of Term, Width x Height.
	PTY           bool
	Term          string
	Width, Height int
	// Resize delivers later window sizes (width, height) while PTY is set.
	Resize <-chan [2]int
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Session runs an interactive session and waits for it. A non-zero exit
// is *ExitError. When ctx ends first the session is closed (with a pty the
// instance's shell gets SIGHUP, as with OpenSSH) and ctx.Err() is returned.
func (c *Client) Session(ctx context.Context, o SessionOptions) error {
	cn, err := c.conn(ctx)
	if err != nil {
		return err
	}
	sess, err := cn.c.NewSession()
	if err != nil {
		return fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close() //nolint:errcheck // teardown: the session's own result is what counts
	if o.PTY {
		term := o.Term
		if term == "" {
			term = "xterm-256color"
		}
		w, h := o.Width, o.Height
		if w <= 0 || h <= 0 {
			w, h = 80, 24
		}
		modes := ssh.TerminalModes{ssh.ECHO: 1, ssh.TTY_OP_ISPEED: 38400, ssh.TTY_OP_OSPEED: 38400}
		if err := sess.RequestPty(term, h, w, modes); err != nil {
			return fmt.Errorf("request a pty: %w", err)
		}
	}
	// Stdin through a pipe we own: ssh.Session copies from a reader in a
	// goroutine that a blocked os.Stdin read would otherwise keep alive.
	if o.Stdin != nil {
		in, err := sess.StdinPipe()
		if err != nil {
			return err
		}
		go func() { io.Copy(in, o.Stdin); in.Close() }() //nolint:errcheck // the copy ends when either side closes; the session's exit status is what counts
	}
	sess.Stdout = orDiscard(o.Stdout)
	sess.Stderr = orDiscard(o.Stderr)
	if o.Command != "" {
		err = sess.Start(o.Command)
	} else {
		err = sess.Shell()
	}
	if err != nil {
		return fmt.Errorf("start remote session: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	for {
		select {
		case err := <-done:
			return exitError(err)
		case sz := <-o.Resize:
			sess.WindowChange(sz[1], sz[0]) //nolint:errcheck // a refused resize leaves the old size
		case <-ctx.Done():
			sess.Signal(ssh.SIGHUP) //nolint:errcheck // the session is cut next either way
			sess.Close()            //nolint:errcheck // teardown: the session's own result is what counts
			return ctx.Err()
		}
	}
}

// Forward relays every connection accepted on ln to remote (host:port as
// the instance sees it, e.g. 127.0.0.1:8000) through this SSH connection,
// until ctx ends or the connection drops. A connection the instance
// refuses is closed and reported to onErr; the listener keeps serving.
func (c *Client) Forward(ctx context.Context, ln net.Listener, remote string, onErr func(error)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() }) //nolint:errcheck // unblocks Accept; its error changes nothing
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("forward to %s: %w", remote, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close() //nolint:errcheck // teardown of a relayed connection
			cn, err := c.conn(ctx)
			if err != nil {
				if onErr != nil {
					onErr(fmt.Errorf("forward to %s: %w", remote, err))
				}
				return
			}
			up, err := cn.c.Dial("tcp", remote)
			if err != nil {
				if onErr != nil {
					onErr(fmt.Errorf("forward to %s on the instance: %w", remote, err))
				}
				return
			}
			defer up.Close() //nolint:errcheck // teardown of a relayed connection
			relay(ctx, conn, up)
		}()
	}
}

// relay copies both ways until both directions end or ctx does.
func relay(ctx context.Context, a, b net.Conn) {
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() }) //nolint:errcheck // cuts the relay; nothing is left to report to
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src) //nolint:errcheck // a relay ends when either side closes; there is no one to tell
		// Pass the EOF on so request/response protocols finish.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite() //nolint:errcheck // the peer may have gone already
		} else {
			dst.Close() //nolint:errcheck // the peer may have gone already
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}
