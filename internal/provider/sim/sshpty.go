package sim

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/gliderlabs/ssh"
)

// startSession starts cmd for an SSH session: on a real pseudo-terminal
// when the client asked for one (as sshd does: the shell is a session
// leader with the pty as its controlling terminal, TERM as requested, and
// window changes applied), else on plain pipes. drain, called after
// cmd.Wait, returns once the pty's last output reached the client.
func startSession(sess ssh.Session, cmd *exec.Cmd) (drain func(), err error) {
	req, winCh, isPty := sess.Pty()
	if !isPty {
		cmd.Stdout = sess
		cmd.Stderr = sess.Stderr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		go func() { io.Copy(stdin, sess); stdin.Close() }() //nolint:errcheck // the copy ends when either side closes; the session's exit status is what counts
		return func() {}, nil
	}
	if cmd.Env == nil { // a nil Env means the host's: keep it
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "TERM="+req.Term)
	// Setsid makes the shell its own process group too, so the session's
	// signal and kill paths (by -pgid) still reach the whole tree.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	tty, err := pty.StartWithAttrs(cmd, &pty.Winsize{Cols: uint16(req.Window.Width), Rows: uint16(req.Window.Height)}, cmd.SysProcAttr)
	if err != nil {
		return nil, err
	}
	// A window change may arrive while the session closes the pty: resize
	// and close take turns, and a closed pty is not resized.
	var ttyMu sync.Mutex
	ttyClosed := false
	go func() {
		for w := range winCh {
			ttyMu.Lock()
			if !ttyClosed {
				pty.Setsize(tty, &pty.Winsize{Cols: uint16(w.Width), Rows: uint16(w.Height)}) //nolint:errcheck // a failed resize leaves the old size
			}
			ttyMu.Unlock()
		}
	}()
	go func() { io.Copy(tty, sess) }() //nolint:errcheck // the copy ends when either side closes; the session's exit status is what counts
	copied := make(chan struct{})
	go func() {
		io.Copy(sess, tty) //nolint:errcheck // ends with EIO once the shell and its children exit
		close(copied)
	}()
	return func() {
		// A background child may hold the terminal open: wait as long as
		// cmd.WaitDelay would, then cut it.
		t := time.NewTimer(cmd.WaitDelay)
		defer t.Stop()
		select {
		case <-copied:
		case <-t.C:
		}
		ttyMu.Lock()
		ttyClosed = true
		tty.Close() //nolint:errcheck // teardown: the shell has exited
		ttyMu.Unlock()
	}, nil
}

// forwardAllowed permits direct-tcpip only to the instance's loopback:
// the simulated instance shares the host's, and nothing else is its own.
func forwardAllowed(_ ssh.Context, host string, _ uint32) bool {
	return host == "127.0.0.1" || host == "localhost" || host == "::1"
}
