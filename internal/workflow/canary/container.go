package canary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/container"
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
// live stream).
func (e *flow) logTo(ctx context.Context, name string, fn func(io.Writer) error) error {
	f, err := e.s.Sink().Create(filepath.Join(e.s.EvidenceDir, name), 0o644, e.s.Stream)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(f)
}
