package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
)

// Serving is a container running in the background (Engine.Serve): a
// server, stopped by signals sent through the engine. Unlike Start's
// long-lived containers, it works with docker and podman alike, and its
// output streams as it runs.
type Serving struct {
	eng  *Engine
	name string
	done chan struct{}
	mu   sync.Mutex
	code int
}

// Serve runs spec in the background; spec.Name is required, since the
// container is signalled and removed by name. Output goes to w until the
// container exits; Done is closed then. Environment values reach the
// engine's environment only, as in Run.
func (e *Engine) Serve(spec RunSpec, w io.Writer) (*Serving, error) {
	if spec.Name == "" {
		return nil, errors.New("start a container: no name given")
	}
	args, env := e.runArgs(spec)
	// Not bound to a context: the container is stopped through the
	// engine (Signal, Remove), which also ends this client.
	cmd := exec.Command(e.Path, args...)
	cmd.Env = append(cmd.Environ(), env...)
	if w == nil {
		w = io.Discard
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s run %s: %w", e.Name, spec.Image, err)
	}
	s := &Serving{eng: e, name: spec.Name, done: make(chan struct{}), code: -1}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		s.mu.Lock()
		switch {
		case err == nil:
			s.code = 0
		case errors.As(err, &ee):
			s.code = ee.ExitCode()
		}
		s.mu.Unlock()
		close(s.done)
	}()
	return s, nil
}

// Name is the container's name.
func (s *Serving) Name() string { return s.name }

// Done is closed once the container (and the engine's client) exited.
func (s *Serving) Done() <-chan struct{} { return s.done }

// ExitCode is the command's exit code once Done is closed (125-127: the
// engine could not create or start the container; -1: unknown).
func (s *Serving) ExitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code
}

// Signal sends sig ("TERM", "KILL") to the container's pid 1. A container
// that already exited is not an error.
func (s *Serving) Signal(ctx context.Context, sig string) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	err := s.eng.command(ctx, nil, "kill", "--signal", sig, s.name)
	select {
	case <-s.done:
		return nil // it exited meanwhile: the engine found nothing to signal
	default:
	}
	return err
}

// Exec runs argv inside the running container with env (values through
// the engine's environment) and returns its exit code; err is for a
// command the engine could not run at all.
func (s *Serving) Exec(ctx context.Context, argv []string, env map[string]string, w io.Writer) (int, error) {
	args := []string{"exec"}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var envList []string
	for _, k := range keys {
		args = append(args, "-e", k)
		envList = append(envList, k+"="+env[k])
	}
	args = append(append(args, s.name), argv...)
	cmd := exec.CommandContext(ctx, s.eng.Path, args...)
	cmd.Env = append(cmd.Environ(), envList...)
	var tail bytes.Buffer
	var sink io.Writer = &tail
	if w != nil {
		sink = io.MultiWriter(w, &tail)
	}
	cmd.Stdout, cmd.Stderr = sink, sink
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.ExitCode() < 125:
		return ee.ExitCode(), nil
	case errors.As(err, &ee):
		return ee.ExitCode(), &RunError{Engine: s.eng.Name, Args: args[:1], Code: ee.ExitCode(), Output: strings.TrimSpace(lastN(tail.String(), 2000))}
	}
	return -1, fmt.Errorf("%s exec %s: %w", s.eng.Name, s.name, err)
}

// Remove removes the container whatever its state (`rm -f`, which kills
// it first) and waits for the engine's client to end. A container that
// exited already is gone (run --rm): nothing to do.
func (s *Serving) Remove(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	err := s.eng.command(ctx, nil, "rm", "-f", s.name)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

func lastN(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
