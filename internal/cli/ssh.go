package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/remote"
)

// SSHOptions are the inputs of `vastrun ssh`.
type SSHOptions struct {
	f        *Factory
	IO       *IOStreams
	Workflow *WorkflowOptions
	RunID    string
	Command  []string
	Forwards []Forward
	// ForcePTY (-t) and NoPTY (-T) override the default: a pty when stdin
	// is a terminal.
	ForcePTY, NoPTY bool
	// NoCommand (-N) only forwards ports.
	NoCommand bool
}

// Forward is one -L [BIND:]LPORT:RHOST:RPORT (or LPORT:RPORT for a port on
// the instance's loopback).
type Forward struct {
	Local  string // host:port to listen on; 127.0.0.1 unless BIND is given
	Remote string // host:port as the instance sees it
}

// ParseForward reads a -L value.
func ParseForward(s string) (Forward, error) {
	parts := strings.Split(s, ":")
	var bind, lport, rhost, rport string
	switch len(parts) {
	case 2:
		bind, lport, rhost, rport = "127.0.0.1", parts[0], "127.0.0.1", parts[1]
	case 3:
		bind, lport, rhost, rport = "127.0.0.1", parts[0], parts[1], parts[2]
	case 4:
		bind, lport, rhost, rport = parts[0], parts[1], parts[2], parts[3]
	default:
		return Forward{}, fmt.Errorf("-L %q: want LOCAL_PORT:REMOTE_PORT, LOCAL_PORT:HOST:PORT or BIND:LOCAL_PORT:HOST:PORT", s)
	}
	for _, p := range []string{lport, rport} {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 || (p == rport && n == 0) {
			return Forward{}, fmt.Errorf("-L %q: %q is not a port", s, p)
		}
	}
	if bind == "" || rhost == "" {
		return Forward{}, fmt.Errorf("-L %q: empty host", s)
	}
	return Forward{Local: net.JoinHostPort(bind, lport), Remote: net.JoinHostPort(rhost, rport)}, nil
}

// NewCmdSSH builds `vastrun ssh`; runF replaces the run in tests.
func NewCmdSSH(f *Factory, runF func(context.Context, *SSHOptions) error) *cobra.Command {
	o := &SSHOptions{f: f, IO: f.IO, Workflow: &WorkflowOptions{allowMissingConfigs: true}}
	var forwards []string
	cmd := &cobra.Command{
		Use:   "ssh [RUN] [-L LOCAL:REMOTE]... [-- COMMAND...]",
		Short: "Open a shell (or run a command, or forward ports) on a run's live instance",
		Long: `Connect to the run's live instance over SSH with the run's own key and the
host key pinned when the run first connected (a changed host key is
refused). Without a command it opens a login shell on a pseudo-terminal;
with one it runs it (on a pty when stdin is a terminal, or with -t).

-L forwards a local port to a host:port as the instance sees it, e.g. a
canary's health URL, TensorBoard or a debugger: -L 8000:8000 listens on
127.0.0.1:8000 here and connects to 127.0.0.1:8000 on the instance. -N only
forwards. Nothing is rented or destroyed; runs that are not live are refused.`,
		Example: `  vastrun ssh                             # a shell on the current run's instance
  vastrun ssh -- nvidia-smi
  vastrun ssh 20261201-abc123 -- tail -f train.log
  vastrun ssh -N -L 6006:6006             # TensorBoard at http://127.0.0.1:6006
  vastrun ssh -L 8000:127.0.0.1:8000 -- python -m http.server 8000`,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			before := args
			if at := cmd.ArgsLenAtDash(); at >= 0 {
				before = args[:at]
			}
			if len(before) > 1 {
				return fmt.Errorf("at most one RUN before --, got %q (put the command after --)", before)
			}
			return nil
		}),
		RunE: runCmd(o, func(cmd *cobra.Command, args []string) error {
			at := cmd.ArgsLenAtDash()
			switch {
			case at == 0:
				o.Command = args
			case at > 0:
				o.RunID, o.Command = args[0], args[at:]
			case len(args) == 1:
				o.RunID = args[0]
			}
			for _, s := range forwards {
				fw, err := ParseForward(s)
				if err != nil {
					return &UsageError{Err: err, Hint: "for example -L 8000:8000, or -L 127.0.0.1:8080:127.0.0.1:8000"}
				}
				o.Forwards = append(o.Forwards, fw)
			}
			if o.NoCommand && len(o.Command) > 0 {
				return &UsageError{Err: errors.New("-N forwards ports only; it takes no command"), Hint: "drop -N, or drop the command after --"}
			}
			if o.NoCommand && len(o.Forwards) == 0 {
				return &UsageError{Err: errors.New("-N without -L has nothing to do"), Hint: "add -L LOCAL:REMOTE"}
			}
			return nil
		}, runF, runSSH),
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&forwards, "local-forward", "L", nil, "forward [BIND:]LOCAL_PORT:[HOST:]PORT to HOST:PORT as the instance sees it (repeatable)")
	fl.BoolVarP(&o.ForcePTY, "tty", "t", false, "allocate a pty even when stdin is not a terminal")
	fl.BoolVarP(&o.NoPTY, "no-tty", "T", false, "never allocate a pty")
	fl.BoolVarP(&o.NoCommand, "no-command", "N", false, "run nothing; only forward ports (-L)")
	fl.StringVarP(&o.Workflow.ConfigPath, "file", "f", "vastrun.yaml", "config file for state_dir (optional)")
	fl.StringVar(&o.Workflow.StateDir, "state-dir", "", "where run journals live (default: state_dir in the config, else .vastrun)")
	return cmd
}

func runSSH(ctx context.Context, o *SSHOptions) error {
	f := o.f
	cfg, err := o.Workflow.loadConfig()
	if err != nil {
		return err
	}
	dir, err := runDir(cfg.StateDir, o.RunID)
	if err != nil {
		return &UsageError{Err: err, Hint: "start a run with 'vastrun up', or name one: vastrun ssh RUN (ids are under " + cfg.StateDir + "/runs)"}
	}
	e, err := newEngine(ctx, f, o.Workflow, cfg, cienv.Detect(f.Getenv))
	if err != nil {
		return err
	}
	if err := openRun(e, dir); err != nil {
		return err
	}
	defer func() { _ = e.Close() }() // releases the journal's lock: its records are fsync'd as appended
	client, inst, err := e.Interactive(ctx)
	var nl *lifecycle.NotLiveError
	if errors.As(err, &nl) {
		return &UsageError{Err: err, Hint: "vastrun ssh reaches only a live instance; rent one with 'vastrun up' (or see 'vastrun status' for the run's state)"}
	}
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()   // always nil: it drops the connection once the session is over
	defer e.Refresh(ctx, client, inst.ID)() // an up rental's lease, renewed while the session lasts

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fwdErr := make(chan error, len(o.Forwards))
	for _, fw := range o.Forwards {
		ln, err := net.Listen("tcp", fw.Local)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("-L: listen on %s: %w", fw.Local, err), Hint: "pick a free local port"}
		}
		f.IO.Infof("forwarding %s to %s on instance %d", ln.Addr(), fw.Remote, inst.ID)
		go func() {
			fwdErr <- client.Forward(ctx, ln, fw.Remote, func(err error) { f.IO.Infof("%v", err) })
		}()
	}
	if o.NoCommand {
		f.IO.Infof("forwarding until interrupted (Ctrl-C)")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fwdErr:
			return err
		}
	}

	so := remote.SessionOptions{Command: strings.Join(o.Command, " "), Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.ErrOut}
	so.PTY = !o.NoPTY && (o.ForcePTY || f.IO.InTTY)
	if so.PTY {
		so.Term = os.Getenv("TERM")
		if in, ok := f.IO.In.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
			// Raw mode: keystrokes (Ctrl-C included) go to the instance.
			if old, err := term.MakeRaw(int(in.Fd())); err == nil {
				defer func() {
					if err := term.Restore(int(in.Fd()), old); err != nil {
						f.IO.Infof("could not restore the terminal (run 'reset'): %v", err)
					}
				}()
			}
			so.Width, so.Height, _ = term.GetSize(int(in.Fd()))
			so.Resize = windowChanges(ctx, int(in.Fd()))
		}
	}
	err = client.Session(ctx, so)
	var ee *remote.ExitError
	if errors.As(err, &ee) {
		return &remoteExitError{exit: ee}
	}
	return err
}

// remoteExitError is a command that ran over `vastrun ssh` and failed. It
// exits 3 like `vastrun exec` (it unwraps to lifecycle.TestFailedError) but says
// what actually failed.
type remoteExitError struct{ exit *remote.ExitError }

func (e *remoteExitError) Error() string { return e.exit.Error() }
func (e *remoteExitError) Unwrap() error { return &lifecycle.TestFailedError{Code: e.exit.Code} }

// windowChanges reports the terminal's size after each SIGWINCH.
func windowChanges(ctx context.Context, fd int) <-chan [2]int {
	out := make(chan [2]int, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				if w, h, err := term.GetSize(fd); err == nil {
					select {
					case out <- [2]int{w, h}:
					default:
					}
				}
			}
		}
	}()
	return out
}
