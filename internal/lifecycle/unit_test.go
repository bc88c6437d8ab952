package lifecycle

import (
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		pat, name string
		want      bool
	}{
		{"gpu/**", "gpu/a.py", true},
		{"gpu/**", "gpu/x/y/z.cu", true},
		{"gpu/**", "cpu/a.py", false},
		{"**/*.cu", "kernels/a.cu", true},
		{"**/*.cu", "a.cu", true},
		{"**/*.cu", "a.cuh", false},
		{"models/*.py", "models/a.py", true},
		{"models/*.py", "models/sub/a.py", false},
		{"Dockerfile", "Dockerfile", true},
		{"Dockerfile", "sub/Dockerfile", false},
		{"**", "anything/at/all", true},
	}
	for _, c := range cases {
		if got := MatchGlob(c.pat, c.name); got != c.want {
			t.Errorf("MatchGlob(%q, %q) = %v", c.pat, c.name, got)
		}
	}
}

func TestTerminalReason(t *testing.T) {
	cases := []struct {
		in         provider.Instance
		createdFor time.Duration
		want       string // "" means not terminal
	}{
		{provider.Instance{ActualStatus: "loading", StatusMsg: "a1b2: Pulling fs layer"}, 0, ""},
		{provider.Instance{ActualStatus: ""}, 0, ""},
		{provider.Instance{ActualStatus: "created"}, time.Minute, ""},
		{provider.Instance{ActualStatus: "created"}, 4 * time.Minute, "stuck in created"},
		{provider.Instance{ActualStatus: "exited", StatusMsg: "container exited with code 1"}, 0, "actual_status exited"},
		{provider.Instance{ActualStatus: "offline"}, 0, "actual_status offline"},
		{provider.Instance{ActualStatus: "unknown"}, 0, "actual_status unknown"},
		{provider.Instance{ActualStatus: "stopped", IntendedStatus: "stopped", CurState: "stopped", NextState: "stopped"}, 0, "paused"},
		{provider.Instance{ActualStatus: "created", StatusMsg: "Error response from daemon: manifest for x:nope not found"}, 0, "image or container error"},
		{provider.Instance{ActualStatus: "created", StatusMsg: "OCI runtime create failed: runc"}, 0, "image or container error"},
		{provider.Instance{ActualStatus: "loading", StatusMsg: "pull access denied for acme/private"}, 0, "image or container error"},
	}
	for _, c := range cases {
		got := terminalReason(c.in, c.createdFor)
		if (c.want == "") != (got == "") || (c.want != "" && !contains(got, c.want)) {
			t.Errorf("terminalReason(%+v, %v) = %q, want %q", c.in, c.createdFor, got, c.want)
		}
	}
}

func TestGPUModelMatching(t *testing.T) {
	cases := []struct {
		smi, vast string
		want      bool
	}{
		{"NVIDIA GeForce RTX 4090", "RTX 4090", true},
		{"NVIDIA GeForce RTX 3090", "RTX 4090", false},
		{"NVIDIA A100-SXM4-80GB", "A100 SXM4", true},
		{"NVIDIA A100-PCIE-40GB", "A100 PCIE", true},
		{"NVIDIA H100 80GB HBM3", "H100 SXM", true},
		{"NVIDIA H100 NVL", "H100 NVL", true},
		{"Tesla T4", "Tesla T4", true},
		{"NVIDIA RTX A6000", "RTX A6000", true},
		{"NVIDIA RTX A5000", "RTX A6000", false},
		{"NVIDIA L40S", "L40S", true},
		{"NVIDIA L40", "L40S", false},
	}
	for _, c := range cases {
		if got := smiHasModel(c.smi, c.vast); got != c.want {
			t.Errorf("smiHasModel(%q, %q) = %v", c.smi, c.vast, got)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A receipt measured on a scaled clock reports wall-clock time, with the
// simulated figures kept and labelled.
func TestReceiptOnScaledClockIsWallClock(t *testing.T) {
	sc := clock.NewScaled(time.Now(), 30)
	start := sc.Now()
	r := &receipt.Receipt{Timings: map[string]float64{"elapsed": 60, "test": 30}, StartedAt: start, FinishedAt: start.Add(60 * time.Second),
		Attempts: []*receipt.Attempt{{RunningAt: start.Add(30 * time.Second)}}}
	toWallClock(r, sc)
	if r.Timings["elapsed"] != 2 || r.Timings["test"] != 1 {
		t.Errorf("wall-clock timings %v, want elapsed 2 and test 1 (60 and 30 simulated s at 30x)", r.Timings)
	}
	if r.SimTime == nil || r.SimTime.Speed != 30 || r.SimTime.Timings["elapsed"] != 60 || !r.SimTime.FinishedAt.Equal(start.Add(60*time.Second)) {
		t.Errorf("simulated figures: %+v", r.SimTime)
	}
	near := func(d, want time.Duration) bool { return (d - want).Abs() < time.Millisecond }
	if d := r.FinishedAt.Sub(r.StartedAt); !near(d, 2*time.Second) || r.FinishedAt.After(time.Now().Add(2*time.Second)) {
		t.Errorf("wall-clock span %v, want 2s, ending no later than now + 2s (%v)", d, r.FinishedAt)
	}
	if got := r.Attempts[0].RunningAt.Sub(r.StartedAt); !near(got, time.Second) {
		t.Errorf("attempt running %v after start, want 1s of wall time", got)
	}
}
