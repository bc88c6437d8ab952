package agent

import (
	"archive/zip"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vastrun/vastrun/internal/config"
)

func TestStepFromTheLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "train.log")
	os.WriteFile(log, []byte("iteration 290 loss 1\n{\"iter\": 300, \"val\": 2}\niteration 310 loss 1\nsaved step 300\n{\"iter\": \"x\"}\nunfinished 9"), 0o644)
	for from, want := range map[string][]int64{"json:iter": {300}, `regex:saved step (\d+)`: {300}, `regex:iteration (\d+)`: {290, 310}, "json:epoch": nil} {
		if err := config.CheckStepFrom(from); err != nil {
			t.Fatal(from, err)
		}
		l := newStepLog(from, log)
		var got []int64
		for _, h := range l.scan() {
			got = append(got, h.step)
		}
		if len(got) != len(want) || (len(got) > 0 && got[len(got)-1] != want[len(want)-1]) {
			t.Errorf("%q: %v, want %v", from, got, want)
		}
		if again := l.scan(); len(again) != 0 {
			t.Errorf("%q: lines read twice: %v", from, again)
		}
	}
	for _, bad := range []string{"json:", "regex:no group", "regex:(", "log:iter"} {
		if config.CheckStepFrom(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// The unfinished last line is read once it ends.
	l := newStepLog(`regex:unfinished (\d+)`, log)
	if hs := l.scan(); len(hs) != 0 {
		t.Fatalf("an unfinished line was read: %v", hs)
	}
	f, _ := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("0\n")
	f.Close()
	if hs := l.scan(); len(hs) != 1 || hs[0].step != 90 {
		t.Fatalf("the finished line: %v", hs)
	}
}

// labels drives the snapshotter's marks through a script's output: each
// entry is a log line or a save ("SAVE"), and the labels the saves got
// are returned in order.
func labels(t *testing.T, stepFrom string, script []string) []int64 {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "train.log")
	os.WriteFile(log, nil, 0o644)
	s := &snapshotter{o: Options{StepFrom: stepFrom, LogFile: log}, consumed: -1, steps: newStepLog(stepFrom, log)}
	var marks []*saveMark
	f, _ := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	defer f.Close()
	for i, line := range script {
		if line == "SAVE" {
			s.steps.scan()
			s.mark(saveMark{path: "ckpt", sig: fileSig{size: int64(i)}, logOff: s.logSize()})
			marks = append(marks, s.marks[len(s.marks)-1])
			s.resolve()
			continue
		}
		f.WriteString(line + "\n")
	}
	s.steps.scan()
	s.resolve()
	var out []int64
	for _, m := range marks {
		if !m.resolved {
			out = append(out, -1)
			continue
		}
		out = append(out, m.label)
	}
	return out
}

func eq(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A save is labelled with the step the script was at when it saved,
// whether it prints that step before saving (minGPT, nanoGPT) or after
// (docs/train.md's advice), however many progress lines come between.
func TestSavesAreLabelledWhenTheyHappen(t *testing.T) {
	for name, c := range map[string]struct {
		from   string
		script []string
		want   []int64
	}{
		"printed before each save, progress between": {`regex:iter (\d+):`,
			[]string{"iter 0: loss", "SAVE", "iter 10: loss", "iter 20: loss", "iter 30: loss", "SAVE", "iter 40: loss", "iter 50: loss"}, []int64{0, 30}},
		"printed after each save": {`regex:iter (\d+): saved`,
			[]string{"SAVE", "iter 100: saved checkpoint", "SAVE", "iter 200: saved checkpoint", "SAVE", "iter 300: saved checkpoint"}, []int64{100, 200, 300}},
		"printed after, seen late": {`regex:iter (\d+): saved`,
			[]string{"SAVE", "SAVE", "iter 100: saved checkpoint", "iter 200: saved checkpoint"}, []int64{100, 200}},
		"json after each save": {"json:iter",
			[]string{"resuming at iteration 200", "iteration 250 loss 1", "SAVE", `{"iter": 300, "val": 1}`, "iteration 350", "SAVE", `{"iter": 400}`}, []int64{300, 400}},
		"nanoGPT re-saves the step it resumed at": {`regex:step (\d+):`,
			[]string{"step 250: train loss 2.5", "SAVE", "iter 251", "step 300: train loss 2.4", "SAVE"}, []int64{250, 300}},
		"no line yet": {`regex:iter (\d+): saved`, []string{"SAVE"}, []int64{-1}},
	} {
		if got := labels(t, c.from, c.script); !eq(got, c.want) {
			t.Errorf("%s: labels %v, want %v", name, got, c.want)
		}
	}
}

// The step is read from the checkpoint itself without train.step_from.
func TestStepOfFile(t *testing.T) {
	dir := t.TempDir()
	w := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	pkl := func(h string) []byte {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// pickle.dumps(..., protocol=2) of nanoGPT's checkpoint layout, with a
	// nested optimizer "step" that must not win over iter_num.
	nano := pkl("80027d71002858050000006d6f64656c71017d710258010000007771035d710428473ff0000000000000474000000000000000657358090000006f7074696d697a657271057d7106285805000000737461746571077d71084b007d7109580400000073746570710a4b077373580c000000706172616d5f67726f757073710b5d710c7d710d58020000006c72710e473fb999999999999a736175580a0000006d6f64656c5f61726773710f7d711058070000006e5f6c6179657271114b02735808000000697465725f6e756d71124df401580d000000626573745f76616c5f6c6f737371134740040000000000005806000000636f6e66696771147d71152858090000006d61785f697465727371164db80b580d0000006576616c5f696e74657276616c71174b3275752e")
	zp := filepath.Join(dir, "ckpt.pt")
	zf, _ := os.Create(zp)
	zw := zip.NewWriter(zf)
	for name, b := range map[string][]byte{"archive/data.pkl": nano, "archive/version": []byte("3\n"), "archive/data/0": make([]byte, 1024)} {
		e, _ := zw.Create(name)
		e.Write(b)
	}
	zw.Close()
	zf.Close()
	cases := []struct {
		path, pattern string
		step          int64
		source        string
	}{
		{zp, "ckpt.pt", 500, "torch.save key iter_num"},
		{w("legacy.pt", pkl("8004951b000000000000007d94288c0469746572944a701101008c056d6f64656c947d94752e")), "legacy.pt", 70000, "torch.save key iter"},
		{w("neg.pt", pkl("80027d7100580b000000676c6f62616c5f7374657071014afdffffff732e")), "neg.pt", -3, "torch.save key global_step"},
		{w("long.pt", pkl("80027d710058040000006974657271018a06000000000001732e")), "long.pt", 1 << 40, "torch.save key iter"},
		{w("state.json", []byte(`{"w": [1, 2], "step": 600, "b": 0.5}`)), "state.json", 600, "json key step"},
		{w("ckpt_1500.pt", []byte("x")), "ckpt_*.pt", 1500, "file name"},
		{w("epoch=3-step=900.ckpt", []byte("x")), "*.ckpt", 900, "file name"},
		{w("model-00001-of-00002.safetensors", []byte("x")), "model-*-of-00002.safetensors", 1, "file name"},
	}
	for _, c := range cases {
		step, src, ok := stepOfFile(c.path, c.pattern)
		if !ok || step != c.step || src != c.source {
			t.Errorf("%s: %d %q %v, want %d %q", filepath.Base(c.path), step, src, ok, c.step, c.source)
		}
	}
	for name, pattern := range map[string]string{"ckpt2.pt": "ckpt2.pt", "plain.txt": "plain.txt", "bad.json": "bad.json"} {
		p := w(name, []byte(`{"step": "x"}`))
		if step, src, ok := stepOfFile(p, pattern); ok {
			t.Errorf("%s: a step where there is none: %d from %s", name, step, src)
		}
	}
}

// Where inotify is unavailable the poll marks a save when it first sees
// it: the snapshot is still taken, and labelled with a line printed
// before that look.
func TestPollingLabelsSavesWithoutInotify(t *testing.T) {
	home := t.TempDir()
	log := filepath.Join(home, "train.log")
	os.WriteFile(log, nil, 0o644)
	o := Options{Files: "out/ckpt.json", StepFrom: `regex:iter (\d+):`, LogFile: log, Home: home, CheckpointDir: filepath.Join(home, "checkpoints"), Log: os.Stderr}
	o = defaults(o)
	s := newSnapshotter(o)
	s.close() // as if inotify were unavailable
	appendLog := func(line string) {
		f, _ := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(line + "\n")
		f.Close()
	}
	never := func() bool { return false }
	for _, it := range []int64{100, 200} {
		appendLog(fmt.Sprintf("iter %d: loss 1", it))
		os.MkdirAll(filepath.Join(home, "out"), 0o755)
		os.WriteFile(filepath.Join(home, "out/ckpt.json"), []byte(fmt.Sprintf(`{"iter": %d}`, it)), 0o644)
		for range 2 { // seen, then seen unchanged: complete
			if err := s.take(phaseRunning, it-100, never); err != nil {
				t.Fatal(err)
			}
		}
		appendLog(fmt.Sprintf("iter %d: loss 1", it+10))
		if _, err := os.Stat(filepath.Join(o.CheckpointDir, strconv.FormatInt(it, 10), "out/ckpt.json")); err != nil {
			t.Fatalf("save %d not snapshot as its step: %v", it, err)
		}
	}
}

// Without train.step_from the step is the checkpoint's own, and the
// status says where it came from.
func TestStepFromTheCheckpointWithoutStepFrom(t *testing.T) {
	home := t.TempDir()
	o := defaults(Options{Files: "out/ckpt.json", LogFile: filepath.Join(home, "train.log"), Home: home, CheckpointDir: filepath.Join(home, "checkpoints")})
	s := newSnapshotter(o)
	defer s.close()
	var reported []int64
	s.onStep = func(step, _ int64) { reported = append(reported, step) }
	os.MkdirAll(filepath.Join(home, "out"), 0o755)
	never := func() bool { return false }
	for _, it := range []int64{250, 300} {
		os.WriteFile(filepath.Join(home, "out/ckpt.json"), []byte(fmt.Sprintf(`{"w": [1], "iter": %d}`, it)), 0o644)
		for range 2 {
			if err := s.take(phaseRunning, 0, never); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(filepath.Join(o.CheckpointDir, strconv.FormatInt(it, 10))); err != nil || s.source != "json key iter" {
			t.Fatalf("save %d: %v, source %q", it, err, s.source)
		}
	}
	if !eq(reported, []int64{250, 300}) {
		t.Fatalf("steps told to the resume watch: %v", reported)
	}
}
