package canary

import (
	"os"
	"sort"
	"strings"
)

// localEnv is the local side's whole environment: what the GPU side gets
// (env:, declared secrets, VASTRUN_*), plus PATH and HOME so that tools
// are found, plus extra. Nothing else from this shell reaches the local
// run, so a variable set only here cannot make the two sides differ.
func (e *flow) localEnv(extra map[string]string) (map[string]string, error) {
	env, err := e.s.TestEnv()
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"PATH", "HOME"} {
		if _, set := env[k]; !set {
			if v := e.s.Getenv(k); v != "" {
				env[k] = v
			}
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	return env, nil
}

// containerEnvFlags passes the same names into a local container; docker
// and podman take each value from their own environment, which is
// localEnv's.
func (e *flow) containerEnvFlags() string {
	var b strings.Builder
	env, _ := e.s.TestEnv()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" -e " + k)
	}
	return b.String()
}

// engineEnv is what docker or podman themselves need from this shell
// (their configuration, runtime directory, registry auth), for the local
// image build and run. The smoke inside the container still sees only
// the names containerEnvFlags passes.
func (e *flow) engineEnv(extra map[string]string) map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CONTAINERS_") || strings.HasPrefix(k, "DOCKER_") || strings.HasPrefix(k, "BUILDAH_") || strings.HasPrefix(k, "XDG_") || k == "REGISTRY_AUTH_FILE" || k == "TMPDIR" {
			if v := e.s.Getenv(k); v != "" {
				out[k] = v
			}
		}
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}
