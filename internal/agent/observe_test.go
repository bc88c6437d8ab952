package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"
)

// restored lays out an instance where checkpoint 300 was restored and put
// back at out/ckpt.pt.
func restored(t *testing.T) (Layout, string) {
	t.Helper()
	l := Layout{Home: t.TempDir()}
	os.MkdirAll(l.Abs(ResumeDir+"/out"), 0o755)
	os.MkdirAll(l.Abs("out"), 0o755)
	os.WriteFile(l.Abs(ResumeDir+"/out/ckpt.pt"), []byte("weights at 300"), 0o644)
	ck := l.Abs("out/ckpt.pt")
	os.WriteFile(ck, []byte("weights at 300"), 0o644)
	b, _ := json.Marshal(RestoreResult{Schema: RestoreSchema, SchemaVersion: SchemaVersion, Step: 300, Placed: []string{"out/ckpt.pt"}})
	os.WriteFile(l.Abs(RestoreFile), b, 0o644)
	os.WriteFile(l.Abs(LogFile), nil, 0o644)
	return l, ck
}

// waitObserved waits (events arrive on inotify's reader) until cond holds.
func waitObserved(t *testing.T, rw *resumeWatch, cond func(*Observed) bool) *Observed {
	t.Helper()
	for range 2000 {
		if o := rw.observed(); cond(o) {
			return o
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("never observed: %+v", rw.observed())
	return nil
}

func run(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v %s", args, err, out)
	}
}

func TestAReadOfTheRestoredCheckpointIsObserved(t *testing.T) {
	if !inotifyAvailable {
		t.Skip("no inotify here")
	}
	l, _ := restored(t)
	rw := watchRestore(l)
	defer rw.close()
	if rw == nil || rw.in == nil {
		t.Fatalf("not watching: %+v", rw)
	}
	rw.started(os.Getpid())
	os.WriteFile(l.Abs(LogFile), []byte("loading\n"), 0o644)
	run(t, l.Home, "cat", "out/ckpt.pt")
	o := waitObserved(t, rw, func(o *Observed) bool { return o.Read != "" })
	if o.Read != "out/ckpt.pt" {
		t.Fatalf("read %q", o.Read)
	}
	rw.step(300, 0) // before the read in the log: first, but not after it
	rw.step(310, 8)
	o = rw.observed()
	if *o.FirstStep != 300 || o.StepAfterRead == nil || *o.StepAfterRead != 310 {
		t.Fatalf("steps: %+v", o)
	}
}

// A file rewritten since the restore is not the restored checkpoint: a
// script that saves over it before it ever reads it proves nothing.
func TestAReadAfterAnOverwriteIsNotOfTheRestore(t *testing.T) {
	if !inotifyAvailable {
		t.Skip("no inotify here")
	}
	l, ck := restored(t)
	rw := watchRestore(l)
	defer rw.close()
	rw.started(os.Getpid())
	run(t, l.Home, "sh", "-c", "echo fresh > out/ckpt.pt")
	waitObserved(t, rw, func(*Observed) bool {
		rw.mu.Lock()
		defer rw.mu.Unlock()
		return rw.changed[ck]
	})
	run(t, l.Home, "cat", "out/ckpt.pt")
	// The restore directory is watched as well: a read there still counts,
	// and is the only one seen.
	run(t, l.Home, "cat", ResumeDir+"/out/ckpt.pt")
	o := waitObserved(t, rw, func(o *Observed) bool { return o.Read != "" })
	if o.Read != ResumeDir+"/out/ckpt.pt" {
		t.Fatalf("read %q: the overwritten file's read counted", o.Read)
	}
}

// A reader outside the workload's process tree, caught holding the file,
// is not the workload.
func TestAReadByAnotherProcessIsNotTheWorkloads(t *testing.T) {
	if !inotifyAvailable {
		t.Skip("no inotify here")
	}
	l, ck := restored(t)
	rw := watchRestore(l)
	defer rw.close()
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	rw.started(other.Process.Pid) // the "workload" is the sleep; this test is not in its tree
	f, err := os.Open(ck)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4)
	f.Read(buf) // held open while the event is looked at
	o := waitObserved(t, rw, func(o *Observed) bool { return o.ForeignReads > 0 || o.Read != "" })
	if o.Read != "" {
		t.Fatalf("a foreign read counted as the workload's: %+v", o)
	}
}

// The agent judges a resume from what it saw when the workload wrote no
// proof; the workload's own proof, right or wrong, is never outvoted.
func TestResumeIsProvenByObservation(t *testing.T) {
	l, _ := restored(t)
	n := func(v int64) *int64 { return &v }
	for name, c := range map[string]struct {
		obs       Observed
		proof     string
		proven    bool
		by        string
		regressed bool
	}{
		"read, then a later step":       {Observed{Read: "out/ckpt.pt", FirstStep: n(300), StepAfterRead: n(300)}, "", true, ProvenObserved, false},
		"read, then started over":       {Observed{Read: "out/ckpt.pt", FirstStep: n(0), StepAfterRead: n(0)}, "", false, "", true},
		"never read, started over":      {Observed{FirstStep: n(0)}, "", false, "", true},
		"read, no step yet":             {Observed{Read: "out/ckpt.pt"}, "", false, "", false},
		"never read, a later step":      {Observed{FirstStep: n(400)}, "", false, "", false},
		"reported":                      {Observed{}, "300", true, ProvenReported, false},
		"reported wrong, observed read": {Observed{Read: "out/ckpt.pt", FirstStep: n(300), StepAfterRead: n(300)}, "200", false, "", false},
	} {
		os.Remove(l.Abs(ProofFile))
		if c.proof != "" {
			os.WriteFile(l.Abs(ProofFile), []byte(c.proof), 0o644)
		}
		st := Status{Schema: "vastrun.agent/v1", LastStep: 300, Observed: &c.obs}
		b, _ := json.Marshal(st)
		os.WriteFile(l.Abs(StatusFile), b, 0o644)
		r := BuildReport(l, ReportOptions{}).Resume
		if r == nil || r.Proven != c.proven || r.ProvenBy != c.by || r.Regressed() != c.regressed {
			t.Errorf("%s: %+v", name, r)
		}
	}
}
