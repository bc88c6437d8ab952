package sim

import (
	"errors"
	"strings"
	"testing"
)

type fakeRunner struct {
	name string
	err  error
}

func (f fakeRunner) Available() (string, error) { return f.name, f.err }

func TestInstanceRuntimeAlwaysSaysTheImageDidNotRun(t *testing.T) {
	for _, tc := range []struct {
		r    ImageRunner
		want string
	}{
		{nil, "not inside the pinned image"},
		{fakeRunner{err: errors.New("podman is not installed")}, "no container engine (podman is not installed)"},
		{fakeRunner{name: "podman"}, "podman is available, but the simulator does not run images yet"},
	} {
		got := InstanceRuntime(tc.r)
		if !strings.Contains(got, tc.want) || !strings.Contains(got, "not inside the pinned image") {
			t.Errorf("%v: %q", tc.r, got)
		}
	}
}
