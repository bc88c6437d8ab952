package smoke

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"sort"
	"syscall"
	"time"
)

// Local runs smokes on this machine with exactly the environment given
// (never the caller's own), in Dir, each in its own process group so that
// a stop reaches the server's children too.
type Local struct {
	Dir string
}

// streamer is a log that takes each of a command's output streams on its
// own (redact.File: each stream is masked before their lines interleave).
type streamer interface{ Stream() io.Writer }

// Run implements [Host]. When ctx ends, the whole process group is killed;
// so is whatever the command left running in the background when it
// ends: nothing a local step starts outlives it.
func (l Local) Run(ctx context.Context, script string, env map[string]string, log io.Writer) (int, error) {
	p, err := l.Start(ctx, script, env, log)
	if err != nil {
		return -1, err
	}
	select {
	case <-p.Done():
		p.(*localProc).killGroup()
		return p.ExitCode(), nil
	case <-ctx.Done():
		p.Kill(ctx) //nolint:errcheck // ctx ended: ctx.Err() is reported
		<-p.Done()
		return -1, ctx.Err()
	}
}

// Start implements [Host].
func (l Local) Start(ctx context.Context, script string, env map[string]string, log io.Writer) (Process, error) {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = l.Dir
	cmd.Env = EnvList(env)
	cmd.Stdout, cmd.Stderr = orDiscard(log), orDiscard(log)
	if s, ok := log.(streamer); ok {
		cmd.Stdout, cmd.Stderr = s.Stream(), s.Stream()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that keeps the output pipe open must not hold Wait
	// forever once the group has been signalled.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &localProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
			if p.code < 0 { // killed by a signal
				p.code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
			}
		default:
			p.code = -1
		}
		close(p.done)
	}()
	return p, nil
}

// Dial implements [Host].
func (Local) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

type localProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

func (p *localProc) Done() <-chan struct{} { return p.done }
func (p *localProc) ExitCode() int         { return p.code }
func (p *localProc) Terminate(context.Context) error {
	return p.signal(syscall.SIGTERM)
}
func (p *localProc) Kill(context.Context) error { return p.signal(syscall.SIGKILL) }

// killGroup kills what is left of the process group once its leader has
// exited (background children).
func (p *localProc) killGroup() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // the group may have exited already; nothing else to do
}

func (p *localProc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// EnvList renders env as KEY=value lines, sorted, for exec.
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
