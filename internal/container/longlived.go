package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// Long-lived containers: what the simulator needs to run a rented
// instance's commands inside its image. Pull an image from its registry,
// start a container that stays up, run commands in it one by one (`exec`),
// and remove it. Podman only: the simulator is the one user, and Podman is
// the engine these machines have.
//
// Contracts:
//   - Values (environment, registry credentials) never reach argv: the
//     environment goes through --env-file on an inherited pipe, credentials
//     through --authfile on a private temporary file.
//   - A registry on loopback is plain HTTP without TLS verification, as
//     docker treats 127.0.0.0/8 by default; every other registry is TLS.
//   - Pull failures are *PullError, carrying the engine's own last error
//     line.

// ErrNotPodman means the long-lived container calls were asked of another engine.
var ErrNotPodman = errors.New("long-lived containers need podman")

// PullError is a pull the engine refused or could not complete.
type PullError struct {
	Ref    string
	Reason string // the engine's final error line, without its "Error: " prefix
	// ManifestUnknown: the registry answered that the reference does not exist.
	ManifestUnknown bool
}

func (e *PullError) Error() string { return fmt.Sprintf("pull %s: %s", e.Ref, e.Reason) }

// Credentials log in to one registry for a pull.
type Credentials struct {
	Registry, User, Token string
}

func (e *Engine) needPodman() error {
	if e.Name != "podman" {
		return fmt.Errorf("%s: %w", e.Name, ErrNotPodman)
	}
	return nil
}

// LoopbackRegistry reports whether ref's registry is on 127.0.0.0/8,
// ::1 or localhost, where plain HTTP is the default.
func LoopbackRegistry(ref string) bool {
	host, _, found := strings.Cut(ref, "/")
	if !found {
		return false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Pull fetches ref into the engine's store. creds, when set, is written to
// a private auth file for this pull only.
func (e *Engine) Pull(ctx context.Context, ref string, creds *Credentials) (err error) {
	if err := e.needPodman(); err != nil {
		return err
	}
	args := []string{"pull", "--quiet"}
	if LoopbackRegistry(ref) {
		args = append(args, "--tls-verify=false")
	}
	if creds != nil {
		f, ferr := os.CreateTemp("", "vastrun-auth-*.json")
		if ferr != nil {
			return fmt.Errorf("pull %s: auth file: %w", ref, ferr)
		}
		// The file holds the registry token: one left behind is a leaked
		// secret, so a failed removal fails the pull.
		defer func() {
			if rerr := os.Remove(f.Name()); rerr != nil {
				err = errors.Join(err, fmt.Errorf("pull %s: remove auth file: %w", ref, rerr))
			}
		}()
		auth := map[string]any{"auths": map[string]any{creds.Registry: map[string]string{"username": creds.User, "password": creds.Token}}}
		err = json.NewEncoder(f).Encode(auth)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("pull %s: auth file: %w", ref, err)
		}
		args = append(args, "--authfile", f.Name())
	}
	err = e.command(ctx, nil, append(args, ref)...)
	var re *RunError
	if errors.As(err, &re) {
		reason := lastErrorLine(re.Output)
		return &PullError{Ref: ref, Reason: reason, ManifestUnknown: strings.Contains(strings.ToLower(reason), "manifest unknown")}
	}
	return err
}

// lastErrorLine is the engine's final "Error: ..." line (retries print
// warnings before it).
func lastErrorLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if r, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "Error: "); ok {
			return r
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// Detached is a container that stays up until removed.
type Detached struct {
	Name    string
	Image   string
	Labels  map[string]string
	Env     map[string]string // passed by name (see the contracts)
	Mounts  []Mount
	Network string   // "" = the engine's default
	Command []string // the long-lived process (pid 1)
	// Entrypoint replaces the image's entrypoint when set.
	Entrypoint string
}

// Mount is one bind mount.
type Mount struct {
	Host, Container string
	ReadOnly        bool
}

// Start creates and starts spec, never pulling, and returns the
// container's id.
func (e *Engine) Start(ctx context.Context, spec Detached) (string, error) {
	if err := e.needPodman(); err != nil {
		return "", err
	}
	args := []string{"run", "-d", "--pull=never", "--name", spec.Name}
	for _, k := range sortedKeys(spec.Labels) {
		args = append(args, "--label", k+"="+spec.Labels[k])
	}
	if spec.Network != "" {
		args = append(args, "--network", spec.Network)
	}
	for _, m := range spec.Mounts {
		v := m.Host + ":" + m.Container
		if m.ReadOnly {
			v += ":ro"
		}
		args = append(args, "-v", v)
	}
	if spec.Entrypoint != "" {
		args = append(args, "--entrypoint", spec.Entrypoint)
	}
	cmd := exec.CommandContext(ctx, e.Path)
	done, err := withEnvFile(cmd, spec.Env)
	if err != nil {
		return "", err
	}
	defer done()
	args = append(args, "--env-file", envFilePath)
	cmd.Args = append(append(append(cmd.Args, args...), spec.Image), spec.Command...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return "", &RunError{Engine: e.Name, Args: args[:2], Code: code, Output: strings.TrimSpace(errOut.String())}
	}
	return strings.TrimSpace(out.String()), nil
}

// envFilePath is where the engine reads the environment from: an
// inherited pipe (fd 3, the first of ExtraFiles), so that values are
// neither in argv nor on disk.
const envFilePath = "/dev/fd/3"

// withEnvFile gives cmd the env file on fd 3. done closes this side's
// copy of the pipe once the command has run.
func withEnvFile(cmd *exec.Cmd, env map[string]string) (done func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("env pipe: %w", err)
	}
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		// One NAME=value per line: a value with a newline cannot pass.
		b.WriteString(k + "=" + strings.ReplaceAll(env[k], "\n", " ") + "\n")
	}
	go func() { w.WriteString(b.String()); w.Close() }() //nolint:errcheck // the reader is the container; a short env shows there as a missing name
	cmd.ExtraFiles = []*os.File{r}
	return func() { r.Close() }, nil //nolint:errcheck // the read end, after the child started: closing it frees our copy
}

// Exec is one command to run in a started container.
type Exec struct {
	Container string
	Dir       string            // working directory inside the container
	Env       map[string]string // passed by name (see the contracts)
	TTY       bool
	Argv      []string
}

// ExecCommand returns the unstarted `exec` of spec: the caller wires its
// stdin, stdout and stderr (or a pseudo-terminal when TTY), starts and
// waits for it; its exit status is the command's (125-127: the engine's).
// Call done after Wait.
func (e *Engine) ExecCommand(spec Exec) (cmd *exec.Cmd, done func(), err error) {
	if err := e.needPodman(); err != nil {
		return nil, nil, err
	}
	cmd = exec.Command(e.Path, "exec", "-i")
	if spec.TTY {
		cmd.Args = append(cmd.Args, "-t")
	}
	if spec.Dir != "" {
		cmd.Args = append(cmd.Args, "-w", spec.Dir)
	}
	done, err = withEnvFile(cmd, spec.Env)
	if err != nil {
		return nil, nil, err
	}
	cmd.Args = append(append(cmd.Args, "--env-file", envFilePath, spec.Container), spec.Argv...)
	return cmd, done, nil
}

// InitPID is the host pid of the container's first process (0 when it is
// not running).
func (e *Engine) InitPID(ctx context.Context, id string) (int, error) {
	out, err := e.output(ctx, "inspect", "--format", "{{.State.Pid}}", id)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// ImageEnv is the environment an image's config sets (NAME → value).
func (e *Engine) ImageEnv(ctx context.Context, ref string) (map[string]string, error) {
	out, err := e.output(ctx, "image", "inspect", "--format", "{{json .Config.Env}}", ref)
	if err != nil {
		return nil, err
	}
	var kvs []string
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &kvs); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", ref, err)
	}
	env := map[string]string{}
	for _, kv := range kvs {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// Remove removes the container, killing whatever still runs in it. A
// container that is already gone is not an error.
func (e *Engine) Remove(ctx context.Context, id string) error {
	return e.command(ctx, nil, "rm", "--force", "--ignore", "--time", "0", id)
}

// RemoveImage removes ref from the store unless a container uses it.
func (e *Engine) RemoveImage(ctx context.Context, ref string) error {
	return e.command(ctx, nil, "rmi", "--ignore", ref)
}

// Containers lists the ids of containers (running or not) carrying label
// KEY=VALUE.
func (e *Engine) Containers(ctx context.Context, label string) ([]string, error) {
	out, err := e.output(ctx, "ps", "--all", "--quiet", "--no-trunc", "--filter", "label="+label)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// output runs the engine and returns its stdout; stderr (warnings) is kept
// only for the error.
func (e *Engine) output(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, e.Path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return "", &RunError{Engine: e.Name, Args: args, Code: code, Output: strings.TrimSpace(errOut.String())}
	}
	return out.String(), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
