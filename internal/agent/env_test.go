package agent

import (
	"slices"
	"testing"
)

// The workload's output goes to a file: Python is told not to buffer it,
// unless the configuration says otherwise (even to "").
func TestWorkloadRunsUnbufferedUnlessTold(t *testing.T) {
	l := Layout{Home: "/home/w"}
	if env := l.WorkloadEnv([]string{"PATH=/bin"}); !slices.Contains(env, "PYTHONUNBUFFERED=1") {
		t.Fatalf("not unbuffered by default: %v", env)
	}
	env := l.WorkloadEnv([]string{"PYTHONUNBUFFERED="})
	if slices.Contains(env, "PYTHONUNBUFFERED=1") || !slices.Contains(env, "PYTHONUNBUFFERED=") {
		t.Fatalf("the configuration's own value was overridden: %v", env)
	}
}
