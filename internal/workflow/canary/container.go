package canary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/container"
	"github.com/vastrun/vastrun/internal/smoke"
)

// The container path of the canary's local smoke: build the repository's
// Containerfile (or Dockerfile) with docker or podman and run the smoke in
// it in CPU mode, with the same environment the GPU side gets.
//
// VASTRUN_CONTAINER_ENGINE chooses: empty tries docker then podman, "none"
// runs on the host, "docker"/"podman" insist on that engine (and fail when
// it does not answer, rather than quietly running on the host).

// ErrContainer means the container could not be built or started: the
// engine's message says why. It is not the smoke's failure.
var ErrContainer = errors.New("the local smoke's container could not be built or started")

// localContainer finds the engine and the build file. A nil engine means
// the host path, with note saying why.
func (e *flow) localContainer(ctx context.Context) (eng *container.Engine, file, note string, err error) {
	want := e.s.Getenv("VASTRUN_CONTAINER_ENGINE")
	if want == "none" {
		return nil, "", "no container engine used (VASTRUN_CONTAINER_ENGINE=none): the smoke command ran directly on this host in CPU mode", nil
	}
	eng, derr := container.Detect(ctx, want)
	if derr != nil {
		if want != "" {
			return nil, "", "", fmt.Errorf("%w: VASTRUN_CONTAINER_ENGINE=%s: %w", ErrContainer, want, derr)
		}
		return nil, "", "no container engine (docker or podman) is available: the smoke command ran directly on this host in CPU mode", nil
	}
	candidates := []string{"Containerfile", "Dockerfile"}
	if f := e.canarySpec().Containerfile; f != "" {
		candidates = []string{f}
	}
	for _, f := range candidates {
		if _, err := os.Stat(filepath.Join(e.s.RepoDir, f)); err == nil {
			return eng, f, "", nil
		}
	}
	if f := e.canarySpec().Containerfile; f != "" {
		return nil, "", "", fmt.Errorf("%w: canary.containerfile %s does not exist in %s", ErrContainer, f, e.s.RepoDir)
	}
	return nil, "", fmt.Sprintf("%s is available but the repository has no Containerfile or Dockerfile (set canary.containerfile): the smoke command ran directly on this host in CPU mode", eng.Name), nil
}

// containerSmoke builds file and runs the smoke in it. The result file is
// written through a mount of its directory; env (and the config's env)
// reaches the container by name, its values never in argv.
func (e *flow) containerSmoke(ctx context.Context, eng *container.Engine, file, resultPath string, env map[string]string) (int, error) {
	tag := "localhost/vastrun-canary:" + strings.ToLower(e.s.State().RunID)
	e.s.Infof("building the image locally with %s from %s", eng.Name, file)
	if err := e.logTo(ctx, "build.log", func(w io.Writer) error { return eng.Build(ctx, e.s.RepoDir, file, tag, w) }); err != nil {
		return -1, fmt.Errorf("%w: %s build: %w (see build.log)", ErrContainer, eng.Name, err)
	}
	e.s.Infof("local smoke (%s, CPU mode): %s", eng.Name, e.canarySpec().Smoke)
	// The same contract locally and on the GPU: env:, declared secrets and
	// the VASTRUN_* names (testEnv), nothing else from this shell.
	cenv, err := e.s.TestEnv()
	if err != nil {
		return -1, err
	}
	for k, v := range env {
		cenv[k] = v
	}
	cenv["VASTRUN_RESULT"] = "/vastrun/" + filepath.Base(resultPath)
	spec := container.RunSpec{Image: tag, Command: []string{"sh", "-c", e.canarySpec().Smoke}, Env: cenv,
		Mounts: map[string]string{filepath.Dir(resultPath): "/vastrun"}}
	code := -1
	err = e.logTo(ctx, "local-smoke.log", func(w io.Writer) error {
		var rerr error
		code, rerr = eng.Run(ctx, spec, w)
		return rerr
	})
	if err != nil {
		return code, fmt.Errorf("%w: %w (see local-smoke.log)", ErrContainer, err)
	}
	return code, nil
}

// logTo runs fn with a redacting writer on the evidence file name (and the
// live stream). Closing writes the streams' last partial lines and syncs
// the file: when that fails the log is incomplete, which the receipt's
// capture errors say; fn's outcome stands.
func (e *flow) logTo(ctx context.Context, name string, fn func(io.Writer) error) error {
	f, err := e.s.Sink().Create(filepath.Join(e.s.EvidenceDir, name), 0o644, e.s.Stream)
	if err != nil {
		return err
	}
	err = fn(f)
	if cerr := f.Close(); cerr != nil {
		e.captureFailed("write "+name, cerr)
	}
	return err
}

// containerHost runs the server smoke contract in the container built from
// the repository's Containerfile (or Dockerfile): the server with the
// image's own ENV (as on the GPU side, which runs the image), on the
// host's network, so that the health URL and the request's localhost mean
// the same as on the instance. The request command, when there is one,
// runs in the same container.
type containerHost struct {
	eng  *container.Engine
	spec container.RunSpec
	srv  *container.Serving
}

func (h *containerHost) Run(ctx context.Context, script string, env map[string]string, log io.Writer) (int, error) {
	if h.srv == nil {
		return -1, errors.New("the server's container was not started")
	}
	return h.srv.Exec(ctx, []string{"sh", "-c", script}, env, log)
}

func (h *containerHost) Start(_ context.Context, script string, env map[string]string, log io.Writer) (smoke.Process, error) {
	spec := h.spec
	spec.Command, spec.Env = []string{"sh", "-c", script}, env
	srv, err := h.eng.Serve(spec, log)
	if err != nil {
		return nil, err
	}
	h.srv = srv
	return servingProc{srv}, nil
}

func (h *containerHost) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// remove leaves no container behind, whatever happened.
func (h *containerHost) remove(ctx context.Context) error {
	if h.srv == nil {
		return nil
	}
	return h.srv.Remove(ctx)
}

// servingProc is the server's container as a smoke.Process: its pid 1 is
// an init that passes TERM on to the server.
type servingProc struct{ *container.Serving }

func (p servingProc) Terminate(ctx context.Context) error { return p.Signal(ctx, "TERM") }
func (p servingProc) Kill(ctx context.Context) error      { return p.Signal(ctx, "KILL") }

// serverContainer builds the image and returns the host that runs the
// server in it, with the environment the container gets: the GPU side's
// (env:, declared secrets, VASTRUN_*), never this shell's PATH or HOME, so
// that the image's own ENV applies on both sides.
func (e *flow) serverContainer(ctx context.Context, eng *container.Engine, file, resultPath string, extra map[string]string) (*containerHost, map[string]string, error) {
	tag := "localhost/vastrun-canary:" + strings.ToLower(e.s.State().RunID)
	e.s.Infof("building the image locally with %s from %s", eng.Name, file)
	if err := e.logTo(ctx, "build.log", func(w io.Writer) error { return eng.Build(ctx, e.s.RepoDir, file, tag, w) }); err != nil {
		return nil, nil, fmt.Errorf("%w: %s build: %w (see build.log)", ErrContainer, eng.Name, err)
	}
	env, err := e.s.TestEnv()
	if err != nil {
		return nil, nil, err
	}
	for k, v := range extra {
		env[k] = v
	}
	env["VASTRUN_RESULT"] = "/vastrun/" + filepath.Base(resultPath)
	return &containerHost{eng: eng, spec: container.RunSpec{
		Image: tag, Name: "vastrun-canary-" + strings.ToLower(e.s.State().RunID), Init: true, Network: "host",
		Mounts: map[string]string{filepath.Dir(resultPath): "/vastrun"},
	}}, env, nil
}
