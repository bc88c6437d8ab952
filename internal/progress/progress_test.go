package progress_test

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/progress"
)

// syncBuf is a buffer the display's ticker and the test share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// advance moves the fake clock one interval at a time, waiting each time
// until the display's ticker waits again, so every tick has happened.
func advance(t *testing.T, c *clock.Fake, step time.Duration, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		waitTimer(t, c)
		c.Advance(step)
	}
	waitTimer(t, c)
}

func waitTimer(t *testing.T, c *clock.Fake) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.Waiters() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the display's ticker never waited")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTerminalRedrawsEverySecondWithSpendAndDeadline(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeTerminal, Width: func() int { return 200 }})
	d.Observe(progress.Event{Phase: progress.PhaseReady, Instance: 7, Attempt: 1, Deadline: t0.Add(2 * time.Minute), DPH: 3.6, BudgetUSD: 5, At: t0})
	d.Line("instance 7 loading: Pulling fs layer")
	advance(t, c, time.Second, 45)
	d.Close()
	s := out.String()
	frames := regexp.MustCompile(`\r[^\r\n]*waiting for instance 7 · 0:(\d\d) / 2:00 · \$3\.6000/h, \$(0\.\d{4}) of \$5\.00 · loading: Pulling fs layer`).FindAllStringSubmatch(s, -1)
	if len(frames) < 45 {
		t.Fatalf("%d redraws in 45 s, want one a second at least:\n%q", len(frames), s)
	}
	last := frames[len(frames)-1]
	if last[1] != "45" || last[2] != "0.0450" { // 3.6 $/h for 45 s
		t.Fatalf("last frame says %s s, $%s:\n%q", last[1], last[2], last[0])
	}
	if !strings.Contains(s, "vastrun: instance 7 loading: Pulling fs layer\n") {
		t.Fatalf("the line for people is missing:\n%q", s)
	}
	if strings.Contains(s, "\x1b[3") {
		t.Fatalf("colour without Color:\n%q", s)
	}
}

func TestTerminalTrainingLineShowsStepsCheckpointsETAAndBudget(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeTerminal, Width: func() int { return 300 }})
	d.Observe(progress.Event{Phase: progress.PhaseTrain, Instance: 9, Attempt: 2, DPH: 0.36, SpentUSD: 0.5, BudgetUSD: 2, At: t0, CheckpointStep: -1})
	c.Advance(10 * time.Minute)
	d.Observe(progress.Event{Phase: progress.PhaseTrain, Instance: 9, Attempt: 2, DPH: 0.36, SpentUSD: 0.56, BudgetUSD: 2, At: c.Now(), Step: 250, Total: 1000, Checkpoints: 2, CheckpointStep: 200})
	d.Close()
	want := "training on instance 9 (attempt 2) · 10:00 · step 250/1000, 2 checkpoints, last 200, ETA 30:00 · $0.3600/h, $0.5600 of $2.00"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("want %q in\n%q", want, out.String())
	}
}

// A warning stays on the training line, after the money.
func TestTerminalTrainingLineKeepsTheWarning(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeTerminal, Width: func() int { return 300 }})
	d.Observe(progress.Event{Phase: progress.PhaseTrain, Instance: 9, Attempt: 2, DPH: 0.36, BudgetUSD: 2, At: t0, CheckpointStep: -1,
		Warning: "instance 9 restored nothing: no checkpoint was committed before the interruption"})
	d.Close()
	want := "no checkpoint yet · $0.3600/h, $0.0000 of $2.00 · warning: instance 9 restored nothing: no checkpoint was …"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("want %q in\n%q", want, out.String())
	}
}

func TestPlainLinesAtPhaseChangesAndAtMostEvery30s(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModePlain})
	d.Observe(progress.Event{Phase: progress.PhaseReady, Instance: 7, Deadline: t0.Add(10 * time.Minute), DPH: 0.18, At: t0})
	advance(t, c, 10*time.Second, 12) // two minutes
	d.Observe(progress.Event{Phase: progress.PhaseVerify, Instance: 7, DPH: 0.18, At: c.Now()})
	d.Close()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	waiting := 0
	for _, l := range lines {
		if strings.Contains(l, "\r") || strings.Contains(l, "\x1b") {
			t.Fatalf("escape codes off a terminal: %q", l)
		}
		if strings.HasPrefix(l, "vastrun: waiting for instance 7") {
			waiting++
		}
	}
	// One at the change, then one each 30 s: 0:30, 1:00, 1:30, 2:00.
	if waiting != 5 || !strings.Contains(out.String(), "vastrun: waiting for instance 7 · 2:00 / 10:00") {
		t.Fatalf("%d waiting lines:\n%s", waiting, out)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "vastrun: verifying instance 7 · 0:00") {
		t.Fatalf("no line at the phase change:\n%s", out)
	}
}

func TestGitHubGroupsPerPhaseAndAnnotations(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeGitHub})
	d.Observe(progress.Event{Phase: progress.PhaseReady, Instance: 7, At: t0})
	d.Line("warning: disk is low")
	d.Observe(progress.Event{Phase: progress.PhaseTest, Instance: 7, At: t0})
	d.Annotate("error", "the GPU test failed (exit status 1)")
	d.Observe(progress.Event{Phase: progress.PhaseDone, Outcome: "failed", At: t0})
	d.Close()
	want := "::group::vastrun: waiting for instance 7\n" +
		"vastrun: waiting for instance 7 · 0:00\n" +
		"::warning title=vastrun::disk is low\n" +
		"vastrun: warning: disk is low\n" +
		"::endgroup::\n" +
		"::group::vastrun: testing on instance 7\n" +
		"vastrun: testing on instance 7 · 0:00\n" +
		"::error title=vastrun::the GPU test failed (exit status 1)\n" +
		"::endgroup::\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestGitLabCollapsibleSections(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeGitLab})
	d.Observe(progress.Event{Phase: progress.PhaseReady, Instance: 7, At: t0})
	d.Close()
	s := out.String()
	start := regexp.MustCompile(`\x1b\[2Ksection_start:\d+:vastrun_ready\[collapsed=true\]\r\x1b\[2Kvastrun: waiting for instance 7\n`)
	end := regexp.MustCompile(`\x1b\[2Ksection_end:\d+:vastrun_ready\r\x1b\[2K\n$`)
	if !start.MatchString(s) || !end.MatchString(s) {
		t.Fatalf("%q", s)
	}
}

func TestQuietShowsOnlyWarnings(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeQuiet})
	d.Observe(progress.Event{Phase: progress.PhaseReady, Instance: 7, At: t0})
	d.Line("instance 7 loading")
	d.Line("warning: budget nearly spent")
	d.Writer().Write([]byte("workload output\n"))
	advance(t, c, time.Minute, 2)
	d.Close()
	if out.String() != "vastrun: warning: budget nearly spent\n" {
		t.Fatalf("%q", out)
	}
}

func TestWorkloadOutputIsWholeLinesAboveTheStatus(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeTerminal, Redact: func(s string) string { return strings.ReplaceAll(s, "hunter2", "***") }})
	d.Observe(progress.Event{Phase: progress.PhaseTest, Instance: 7, At: t0})
	w := d.Writer()
	w.Write([]byte("step 1 ok\nstep 2"))
	w.Write([]byte(" ok\n"))
	w.Write([]byte("tail"))
	d.Line("secret is hunter2")
	d.Close()
	s := out.String()
	if !strings.Contains(s, "\r\x1b[2Kstep 1 ok\n") || !strings.Contains(s, "\r\x1b[2Kstep 2 ok\n") || !strings.HasSuffix(s, "tail\n") {
		t.Fatalf("%q", s)
	}
	if strings.Contains(s, "hunter2") {
		t.Fatalf("a secret reached the terminal: %q", s)
	}
}

func TestDurationAndUSD(t *testing.T) {
	for d, want := range map[time.Duration]string{7 * time.Second: "0:07", 12*time.Minute + 5*time.Second: "12:05", time.Hour + 2*time.Minute + 3*time.Second: "1:02:03", -time.Second: "0:00"} {
		if got := progress.Duration(d); got != want {
			t.Errorf("Duration(%s) = %s, want %s", d, got, want)
		}
	}
	if progress.USD(0.04199) != "$0.0420" || progress.USD(2) != "$2.00" {
		t.Error(progress.USD(0.04199), progress.USD(2))
	}
}

func TestHoldKeepsTheStatusLineOffAPrompt(t *testing.T) {
	c := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: c, Mode: progress.ModeTerminal})
	d.Observe(progress.Event{Phase: progress.PhaseTrain, Instance: 7, At: t0})
	d.Hold(true)
	before := len(out.String())
	advance(t, c, time.Second, 5)
	if s := out.String()[before:]; s != "" {
		t.Fatalf("redrawn while held: %q", s)
	}
	d.Hold(false)
	d.Close()
	if !strings.Contains(out.String()[before:], "training on instance 7") {
		t.Fatal("the status line did not come back")
	}
}

// lastFrame is the status line the terminal shows last.
func lastFrame(s string) string {
	i := strings.LastIndex(s, "\r")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(s[i+1:], "\x1b[K")
}

// TestETAFromTheCurrentAttemptsPace: the ETA is the steps left at the
// pace of this attempt (steps done since it began, from the step it
// resumed at, over its time), so while steps come at a steady pace it
// never rises: not on a first attempt, not after a resume (where the
// run's absolute step over the attempt's time made it rise), not after a
// slow start.
func TestETAFromTheCurrentAttemptsPace(t *testing.T) {
	eta := regexp.MustCompile(`ETA (\d+:\d\d(?::\d\d)?)`)
	parse := func(s string) time.Duration {
		p := strings.Split(s, ":")
		var d time.Duration
		for _, f := range p {
			n, _ := time.ParseDuration(f + "s")
			d = d*60 + n
		}
		return d
	}
	cases := []struct {
		name      string
		attempt   int
		resumedAt int64         // the last committed checkpoint when the attempt began (-1: none)
		startup   time.Duration // before the first step
		from      int64         // the first step the workload reports
		perMin    int64         // steps a minute, steady
		want      []string      // the ETA after each minute
	}{
		{"first attempt", 1, -1, 0, 25, 25, []string{"39:00", "38:00", "37:00", "36:00"}},
		{"resumed at 300", 2, 300, 0, 325, 25, []string{"27:00", "26:00", "25:00", "24:00"}},
		{"resumed at 300 after a slow start", 2, 300, 2 * time.Minute, 325, 25, []string{"1:21:00", "52:00", "41:40", "36:00"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			out := &syncBuf{}
			d := progress.New(progress.Options{Out: out, Clock: clk, Mode: progress.ModeTerminal, Width: func() int { return 400 }})
			defer d.Close()
			ev := progress.Event{Phase: progress.PhaseTrain, Instance: 9, Attempt: c.attempt, CheckpointStep: c.resumedAt, At: t0}
			d.Observe(ev)
			clk.Advance(c.startup)
			var prev time.Duration
			for i, want := range c.want {
				clk.Advance(time.Minute)
				ev.At, ev.Step, ev.Total = clk.Now(), c.from+int64(i)*c.perMin, 1000
				d.Observe(ev)
				m := eta.FindStringSubmatch(lastFrame(out.String()))
				if m == nil {
					t.Fatalf("minute %d: no ETA in %q", i+1, lastFrame(out.String()))
				}
				if m[1] != want {
					t.Errorf("minute %d, step %d: ETA %s, want %s", i+1, ev.Step, m[1], want)
				}
				if got := parse(m[1]); i > 0 && got > prev {
					t.Errorf("minute %d: the ETA rose from %v to %v at a steady pace", i+1, prev, got)
				}
				prev = parse(m[1])
			}
		})
	}
}

// TestSimulatedClockShownInWallTime: under --sim (a clock 30× the wall
// clock) the line shows wall time, and the simulated figures labelled.
func TestSimulatedClockShownInWallTime(t *testing.T) {
	clk := clock.NewFake(t0)
	out := &syncBuf{}
	d := progress.New(progress.Options{Out: out, Clock: clk, Mode: progress.ModeTerminal, Width: func() int { return 400 }, Speed: 30})
	defer d.Close()
	ev := progress.Event{Phase: progress.PhaseTrain, Instance: 9, Attempt: 1, CheckpointStep: -1, At: t0, Deadline: t0.Add(20 * time.Minute)}
	d.Observe(ev)
	clk.Advance(10 * time.Minute) // 20 s of wall time
	ev.At, ev.Step, ev.Total = clk.Now(), 250, 1000
	d.Observe(ev)
	want := "training on instance 9 · 0:20 / 0:40 (sim 10:00 / 20:00 at 30×) · step 250/1000, no checkpoint yet, ETA 1:00 (sim 30:00)"
	if got := lastFrame(out.String()); !strings.Contains(got, want) {
		t.Fatalf("want %q in\n%q", want, got)
	}
}
