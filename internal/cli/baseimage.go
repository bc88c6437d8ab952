package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/container"
)

// checkBaseImages gets the base images of the canary's local container
// before anything else happens: present ones are used, missing ones are
// pulled, as the engine's own build would. Where one cannot be pulled
// (offline, an unknown name) the canary stops here, exit 2, with the pull
// to run (*container.MissingImageError), instead of failing its local
// build after the preflight. Whether a container is used at all is the
// workflow's decision (canary/container.go): without an engine or a build
// file there is nothing to check here.
func checkBaseImages(ctx context.Context, f *Factory, cfg *config.Config) error {
	want := f.Getenv("VASTRUN_CONTAINER_ENGINE")
	if want == "none" {
		return nil
	}
	eng, err := container.Detect(ctx, want)
	if err != nil {
		return nil // the workflow runs on the host, or refuses the engine named
	}
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	candidates := []string{"Containerfile", "Dockerfile"}
	if cfg.Canary.Containerfile != "" {
		candidates = []string{cfg.Canary.Containerfile}
	}
	for _, file := range candidates {
		if _, err := os.Stat(filepath.Join(repo, file)); err == nil {
			f.IO.Infof("local container: %s gets the base images of %s (pulling the missing ones)", eng.Name, file)
			return eng.EnsureBaseImages(ctx, repo, file, io.Discard)
		}
	}
	return nil
}
