package canary

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
