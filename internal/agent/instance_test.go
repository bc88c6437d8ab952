package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

func TestDecodeReportRefusesOtherSchemasAndGarbage(t *testing.T) {
	good := BuildReport(Layout{Home: t.TempDir()}, ReportOptions{})
	b, _ := json.Marshal(good)
	if r, err := DecodeReport(b); err != nil || r.Workload.State != WorkloadAbsent {
		t.Fatalf("a fresh instance: %+v %v", r, err)
	}
	bad := map[string]string{
		"future version": strings.Replace(string(b), `"schema_version":1`, `"schema_version":2`, 1),
		"other schema":   strings.Replace(string(b), StatusSchema, "vastrun.agent/v1", 1),
		"not JSON":       "==exit\n0\n",
		"unknown state":  strings.Replace(string(b), `"state":"absent"`, `"state":"finished"`, 1),
		"exit no code":   strings.Replace(string(b), `"state":"absent"`, `"state":"exited"`, 1),
	}
	for name, text := range bad {
		if _, err := DecodeReport([]byte(text)); !errors.Is(err, ErrSchema) {
			t.Errorf("%s: %v, want ErrSchema", name, err)
		}
	}
}

// The workload runs under Launch from the login directory whatever it does
// to its own directory; its exit status comes from wait(2) and reaches the
// report; the path variables it sees are absolute.
func TestLaunchRecordsTheExitOfAWorkloadThatChangesDirectory(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	os.MkdirAll(filepath.Join(l.Home, "sub"), 0o755)
	os.MkdirAll(l.Abs(StateDir), 0o755)
	sv := &Supervisor{Layout: l, Clock: clock.Real{}, Env: []string{"PATH=/usr/bin:/bin", "VASTRUN_RESULT=.vastrun/result.json"},
		Command: `cd sub && echo "$VASTRUN_RESULT" > seen && export PATH=/nonexistent && exit 5`}
	_, exited, err := sv.Launch()
	if err != nil {
		t.Fatal(err)
	}
	if r := BuildReport(l, ReportOptions{}); r.Workload.State != WorkloadRunning && r.Workload.State != WorkloadLost && r.Workload.State != WorkloadExited {
		t.Fatalf("state %q", r.Workload.State)
	}
	select {
	case code := <-exited:
		if code != 5 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the exit was never delivered")
	}
	sv.Finalize()
	r := BuildReport(l, ReportOptions{})
	if r.Workload.State != WorkloadExited || r.Workload.ExitCode == nil || *r.Workload.ExitCode != 5 || !r.Workload.Finalized {
		t.Fatalf("workload %+v", r.Workload)
	}
	seen, _ := os.ReadFile(filepath.Join(l.Home, "sub", "seen"))
	if got := strings.TrimSpace(string(seen)); got != filepath.Join(l.Home, ".vastrun/result.json") {
		t.Fatalf("VASTRUN_RESULT seen by the workload: %q", got)
	}
}

func TestStartRefusesASecondWorkload(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	// A workload ran here before: the record says so.
	os.MkdirAll(l.Abs(StateDir), 0o755)
	code := 0
	l.writeRecord(record{State: "exited", ExitCode: &code})
	res, err := Start(l, "/nonexistent/vastrun", nil, nil, nil)
	if err != nil || res.Started || res.Refused == "" {
		t.Fatalf("with a record: %+v %v", res, err)
	}
	// An agent holds the lock: refused without looking further.
	l2 := Layout{Home: t.TempDir()}
	f, held, err := l2.lock()
	if err != nil || held {
		t.Fatal(err, held)
	}
	defer f.Close()
	res, err = Start(l2, "/nonexistent/vastrun", nil, nil, nil)
	if err != nil || res.Started || !strings.Contains(res.Refused, "already running") {
		t.Fatalf("with the lock held: %+v %v", res, err)
	}
	if r := BuildReport(l2, ReportOptions{}); !r.Agent.Running {
		t.Fatal("the report should see the agent's lock")
	}
}

func TestResumeProofIsValidatedByTheAgent(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	os.MkdirAll(l.Abs(StateDir), 0o755)
	b, _ := json.Marshal(RestoreResult{Schema: RestoreSchema, SchemaVersion: SchemaVersion, Step: 300})
	os.WriteFile(l.Abs(RestoreFile), b, 0o644)
	for text, want := range map[string]string{"300\n": "proven", "200": "unproven", "300\n==exit\n0\n": "error", "": "none", strings.Repeat("9", 100): "error"} {
		os.WriteFile(l.Abs(ProofFile), []byte(text), 0o644)
		r := BuildReport(l, ReportOptions{}).Resume
		got := "none"
		switch {
		case r.Error != "":
			got = "error"
		case r.ReportedStep != nil && r.Proven:
			got = "proven"
		case r.ReportedStep != nil:
			got = "unproven"
		}
		if got != want || r.RestoredStep != 300 {
			t.Errorf("proof %q: %s %+v, want %s", text, got, r, want)
		}
	}
}

func TestDiskVerdict(t *testing.T) {
	const g = 1 << 30
	for _, c := range []struct {
		free      uint64
		size      int64
		files     bool
		low, full bool
	}{
		{100 * g, 0, false, false, false},
		{100 * g, g, false, false, false},
		{2 * g, g, false, true, false},
		{g / 2, g, false, true, true},
		{3 * g / 2, g, true, true, true},
	} {
		low, full := diskVerdict(c.free, c.size, c.files)
		if low != c.low || full != c.full {
			t.Errorf("%+v: low %v full %v", c, low, full)
		}
	}
}

func TestHeartbeatAgeAndTouch(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	os.MkdirAll(l.Abs(StateDir), 0o755)
	clk := clock.NewFake(time.Now())
	if r := BuildReport(l, ReportOptions{Touch: true, Clock: clk}); r.HeartbeatAgeSeconds != nil {
		t.Fatal("no heartbeat yet, but an age")
	}
	clk.Advance(90 * time.Second)
	r := BuildReport(l, ReportOptions{Clock: clk})
	if r.HeartbeatAgeSeconds == nil || *r.HeartbeatAgeSeconds < 89 || *r.HeartbeatAgeSeconds > 91 {
		t.Fatalf("age %v", r.HeartbeatAgeSeconds)
	}
}
