package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/container"
)

func TestInstanceRuntimeSaysWhereTheCommandsRan(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, Sandboxed},
		{Config{ImagesOff: "VASTRUN_SIM_IMAGES is not set to podman"}, Sandboxed + ": VASTRUN_SIM_IMAGES is not set to podman"},
		{Config{Images: &container.Engine{Name: "podman"}}, "inside the pinned image reg.example/app@sha256:ab (pulled from its registry and run by podman"},
	} {
		s := &Server{cfg: tc.cfg}
		if got := s.InstanceRuntime("reg.example/app@sha256:ab"); !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

func TestImageEngineModes(t *testing.T) {
	for _, mode := range []string{"", "off"} {
		eng, off, err := ImageEngine(context.Background(), mode)
		if eng != nil || err != nil || !strings.Contains(off, ImagesEnv) {
			t.Errorf("%q: %v %q %v", mode, eng, off, err)
		}
	}
	if _, _, err := ImageEngine(context.Background(), "docker"); err == nil || !strings.Contains(err.Error(), "want podman or off") {
		t.Errorf("docker: %v", err)
	}
	t.Setenv("PATH", t.TempDir()) // no podman
	eng, off, err := ImageEngine(context.Background(), "podman")
	if eng != nil || err != nil || !strings.Contains(off, "podman: not installed") {
		t.Errorf("podman missing: %v %q %v", eng, off, err)
	}
}
