package sim

import (
	"context"
	"fmt"

	"github.com/vastrun/vastrun/internal/container"
)

// ImagesEnv names the setting that chooses where simulated instances run
// their commands: unset or "off", in a host sandbox (the default: no pull,
// no engine, nothing slower than a directory); "podman", inside the
// pinned image, pulled from its registry and run by Podman, when Podman
// works here (otherwise the sandbox, and the receipts say why).
const ImagesEnv = "VASTRUN_SIM_IMAGES"

// ImageEngine reads the ImagesEnv value mode: the engine to run images
// with, or nil and why not (for the receipts). An unknown mode is an error.
func ImageEngine(ctx context.Context, mode string) (*container.Engine, string, error) {
	switch mode {
	case "", "off":
		return nil, ImagesEnv + " is not set to podman", nil
	case "podman":
		eng, err := container.Detect(ctx, "podman")
		if err != nil {
			return nil, "no container engine (" + err.Error() + ")", nil
		}
		return eng, "", nil
	}
	return nil, "", fmt.Errorf("%s=%q: want podman or off", ImagesEnv, mode)
}

// Sandboxed is the start of the receipts' note when the commands ran in
// the host sandbox.
const Sandboxed = "the simulated instance ran its commands on this host in a sandbox (only the uploaded files, a fake nvidia-smi), not inside the pinned image"

// InstanceRuntime says, for every receipt of a simulated run of image,
// where the simulated instance's commands ran: inside image (Config.Images)
// or in the host sandbox, which sees only the uploaded files, so that a
// smoke needing the image's contents fails there and one using host paths
// passes there but would not in the real image. The sandbox note says why
// the image did not run.
func (s *Server) InstanceRuntime(image string) string {
	if s.cfg.Images != nil {
		return fmt.Sprintf("the simulated instance ran its commands inside the pinned image %s (pulled from its registry and run by %s, a fake nvidia-smi on PATH), not on a GPU", image, s.cfg.Images.Name)
	}
	if s.cfg.ImagesOff != "" {
		return Sandboxed + ": " + s.cfg.ImagesOff
	}
	return Sandboxed
}

// HostSandbox says whether simulated instances run their commands on
// this host (the sandbox), where any binary this host runs runs too.
func (s *Server) HostSandbox() bool { return s.cfg.Images == nil }

func lastLine(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}
