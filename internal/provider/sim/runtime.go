package sim

import (
	"fmt"
	"os/exec"
)

// ImageRunner is a container engine that could run a simulated instance's
// commands inside its pinned image. It is an interface so that the
// container package (engine detection and run) can stand in for the probe
// below.
type ImageRunner interface {
	// Available names the working engine, or says why none can be used.
	Available() (engine string, err error)
}

// PodmanProbe finds a podman that answers `podman info`.
type PodmanProbe struct{}

// Available implements [ImageRunner].
func (PodmanProbe) Available() (string, error) {
	path, err := exec.LookPath("podman")
	if err != nil {
		return "", fmt.Errorf("podman is not installed")
	}
	if out, err := exec.Command(path, "info", "--format", "{{.Host.OCIRuntime.Name}}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("podman info failed: %v: %s", err, lastLine(string(out)))
	}
	return "podman", nil
}

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

// InstanceRuntime says, for every receipt of a simulated run, where the
// simulated instance's commands ran. Today they always run on this host in
// a per-instance sandbox with a fake nvidia-smi, seeing only the uploaded
// files, not inside the pinned image: a smoke that needs the image's
// contents fails here, and one that uses host paths passes here but would
// not in the real image. The note says so, and whether an engine that
// could run the image is present.
func InstanceRuntime(r ImageRunner) string {
	const sandbox = "the simulated instance ran its commands on this host in a sandbox (only the uploaded files, a fake nvidia-smi), not inside the pinned image"
	if r == nil {
		return sandbox
	}
	if eng, err := r.Available(); err != nil {
		return sandbox + ": no container engine (" + err.Error() + ")"
	} else {
		return sandbox + ": " + eng + " is available, but the simulator does not run images yet"
	}
}
