// Package container finds a local container engine (docker or podman) and
// drives it: save an image to an archive, build, and run a command in a
// container. It only ever runs the engine's own CLI, with no credentials in
// its arguments.
//
// Contracts:
//   - Detect returns ErrNoEngine (wrapped, with each candidate's reason)
//     when no engine answers; callers fall back or refuse, never guess.
//   - An engine "answers" when `<engine> info` succeeds. Whether it can run
//     a container (runtime, cgroups) is only known by running one: Run
//     reports that failure with the engine's own message (*RunError).
//   - Engine settings such as podman's runtime and cgroup manager come from
//     the engine's own configuration (CONTAINERS_CONF), not from vastrun.
//   - Serve starts a named container in the background (docker or podman);
//     it is signalled, exec'd into and removed by that name, and its Done
//     closes when the engine's client ends.
//   - Build fetches base images as a plain build does (missing ones are
//     pulled); EnsureBaseImages does it first and, where a base image
//     cannot be pulled, returns *MissingImageError with the exact pull to
//     run, before anything else is built or rented.
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

// ErrNoEngine means neither docker nor podman is usable here.
var ErrNoEngine = errors.New("no container engine (docker or podman) is available")

// Engine is one container engine's CLI.
type Engine struct {
	Name string // "docker" or "podman"
	Path string // the executable
}

// Candidates is the order engines are tried in.
var Candidates = []string{"docker", "podman"}

// Detect returns the first engine whose `info` succeeds. want, when not
// empty, names the only engine to try (the user's choice).
func Detect(ctx context.Context, want string) (*Engine, error) {
	names := Candidates
	if want != "" {
		names = []string{want}
	}
	var why []string
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			why = append(why, n+": not installed")
			continue
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, p, "info")
		cmd.Stdout, cmd.Stderr = io.Discard, &out
		if err := cmd.Run(); err != nil {
			why = append(why, fmt.Sprintf("%s: `%s info` failed: %s", n, n, firstLine(out.String(), err)))
			continue
		}
		return &Engine{Name: n, Path: p}, nil
	}
	return nil, fmt.Errorf("%w (%s)", ErrNoEngine, strings.Join(why, "; "))
}

func firstLine(s string, err error) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return err.Error()
	}
	return s
}

// RunError is an engine command that failed; Output is its stderr tail.
type RunError struct {
	Engine string
	Args   []string
	Code   int
	Output string
}

func (e *RunError) Error() string {
	return fmt.Sprintf("%s %s: exit status %d: %s", e.Engine, strings.Join(e.Args, " "), e.Code, e.Output)
}

// command runs the engine with args, streaming output to w (nil: kept
// only for the error).
func (e *Engine) command(ctx context.Context, w io.Writer, args ...string) error {
	var tail bytes.Buffer
	cmd := exec.CommandContext(ctx, e.Path, args...)
	var sink io.Writer = &tail
	if w != nil {
		sink = io.MultiWriter(w, &tail)
	}
	cmd.Stdout, cmd.Stderr = sink, sink
	err := cmd.Run()
	if err == nil {
		return nil
	}
	code := -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	out := tail.String()
	if len(out) > 2000 {
		out = out[len(out)-2000:]
	}
	return &RunError{Engine: e.Name, Args: args, Code: code, Output: strings.TrimSpace(out)}
}

// Save writes image to dest as a docker-archive tarball (the format both
// engines write and go-containerregistry's tarball package reads).
func (e *Engine) Save(ctx context.Context, image, dest string) error {
	args := []string{"save", "-o", dest}
	if e.Name == "podman" {
		args = append(args, "--format", "docker-archive")
	}
	return e.command(ctx, nil, append(args, image)...)
}

// Build builds the image tag from dir with the given Containerfile
// (relative to dir; empty: the engine's default). Build output goes to w.
func (e *Engine) Build(ctx context.Context, dir, file, tag string, w io.Writer) error {
	args := []string{"build", "-t", tag}
	if e.Name == "podman" {
		// Base images as the engine fetches them for a plain build: a
		// missing one is pulled (EnsureBaseImages does it first, and says
		// what to run where it cannot). The build's own steps stay offline.
		args = append(args, "--pull=missing", "--network", "none")
	}
	if file != "" {
		args = append(args, "-f", file)
	}
	return e.command(ctx, w, append(args, dir)...)
}

// RunSpec is one container to run to completion.
type RunSpec struct {
	Image   string
	Command []string          // argv inside the container
	Env     map[string]string // names and values; values never reach argv (see Run)
	Mounts  map[string]string // host dir → container dir
	Network string            // "" = the engine's default; "none" = isolated; "host" = this host's
	Ports   []int             // published on 127.0.0.1 with the same number
	Name    string            // the container's name ("" = the engine picks one)
	// Init runs a minimal init as pid 1 (--init), so that a stop signal
	// reaches the command even when it installs no handler of its own.
	Init bool
}

// runArgs is `run` with spec's flags, and the environment that carries
// spec.Env's values (by name in argv, values only in the engine's env).
func (e *Engine) runArgs(spec RunSpec) (args, env []string) {
	// The image is always local (built or loaded here): never pull.
	args = []string{"run", "--rm", "--pull=never"}
	if spec.Name != "" {
		args = append(args, "--name", spec.Name)
	}
	if spec.Init {
		args = append(args, "--init")
	}
	if spec.Network != "" {
		args = append(args, "--network", spec.Network)
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-e", k)
		env = append(env, k+"="+spec.Env[k])
	}
	hosts := make([]string, 0, len(spec.Mounts))
	for h := range spec.Mounts {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		args = append(args, "-v", h+":"+spec.Mounts[h])
	}
	for _, p := range spec.Ports {
		args = append(args, "-p", fmt.Sprintf("127.0.0.1:%d:%d", p, p))
	}
	args = append(args, spec.Image)
	return append(args, spec.Command...), env
}

// Run runs spec and returns the command's exit code. A container that
// could not be started at all returns an error (*RunError, the engine's
// message); a command that ran and exited non-zero returns its code.
// Environment values are passed through the engine's environment
// (`-e NAME` without a value), so they never appear in its argv.
func (e *Engine) Run(ctx context.Context, spec RunSpec, w io.Writer) (int, error) {
	args, env := e.runArgs(spec)
	cmd := exec.CommandContext(ctx, e.Path, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var tail bytes.Buffer
	var sink io.Writer = &tail
	if w != nil {
		sink = io.MultiWriter(w, &tail)
	}
	cmd.Stdout, cmd.Stderr = sink, sink
	if s, ok := w.(interface{ Stream() io.Writer }); ok {
		// A log that masks each stream on its own (redact.File) takes the
		// container's stdout and stderr apart, before they interleave.
		t := &lockedBuffer{b: &tail}
		cmd.Stdout, cmd.Stderr = io.MultiWriter(s.Stream(), t), io.MultiWriter(s.Stream(), t)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.ExitCode() < 125:
		return ee.ExitCode(), nil
	case errors.As(err, &ee):
		// 125-127: the engine could not create or start the container
		// (docker and podman agree on these codes).
		out := strings.TrimSpace(tail.String())
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return ee.ExitCode(), &RunError{Engine: e.Name, Args: args[:2], Code: ee.ExitCode(), Output: out}
	}
	return -1, fmt.Errorf("%s run %s: %w", e.Name, spec.Image, err)
}

// lockedBuffer is a buffer two copying goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
