package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// The tests below run the switch on a fake clock that moves only when the
// switch waits (clock.Fake.OnWait): the whole life of a switch, hours of
// it, runs in the test's goroutine, and no outcome depends on how fast the
// machine is.

// autoClock is a fake clock that advances by every wait as it is asked
// for, calling each (if set) at every wait with the time it is then; past
// limit it cancels the test's context, so a switch that never ends fails
// the test instead of hanging it.
func autoClock(t *testing.T, start time.Time, limit time.Duration, each func(now time.Time)) (*clock.Fake, context.Context, *[]time.Duration) {
	t.Helper()
	clk := clock.NewFake(start)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var waits []time.Duration
	clk.OnWait = func(d time.Duration) {
		waits = append(waits, d)
		if each != nil {
			each(clk.Now())
		}
		if clk.Now().Sub(start) > limit {
			cancel()
			return
		}
		clk.Advance(d)
	}
	return clk, ctx, &waits
}

func armed(t *testing.T, l Layout, spec DeadManSpec) {
	t.Helper()
	os.MkdirAll(l.Abs(StateDir), 0o755)
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(l.Abs(DeadManFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// apiFaults answers destroys as Vast did in the review (D1): 503 ten
// times, 429 twenty times, then the instance is gone.
type apiFaults struct {
	clk   clock.Clock
	calls []time.Time
	urls  map[string]bool
}

func (a *apiFaults) destroy(_ context.Context, url string) (bool, error) {
	a.calls = append(a.calls, a.clk.Now())
	if a.urls == nil {
		a.urls = map[string]bool{}
	}
	a.urls[url] = true
	n := len(a.calls)
	switch {
	case n <= 10:
		return false, &provider.APIError{Op: "destroy instance 7", Status: 503, Msg: "simulated failure"}
	case n <= 30:
		return false, &provider.APIError{Op: "destroy instance 7", Status: 429, Code: "rate_limit_exceeded"}
	}
	return true, nil
}

// A controller that beats keeps the switch quiet; once it stops, the
// switch fires after the TTL and destroys until the API says the instance
// is gone, through 503s and 429s, backing off (capped), every try logged.
func TestDeadManFiresAfterTheTTLAndNeverGivesUp(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var lastBeat time.Time
	clk, ctx, waits := autoClock(t, t0, 24*time.Hour, func(now time.Time) {
		if now.Before(t0.Add(10 * time.Minute)) { // the controller lives ten minutes
			if _, err := touchHeartbeat(l, now); err != nil {
				t.Error(err)
			}
			lastBeat = now
		}
	})
	armed(t, l, DeadManSpec{TTL: Duration(2 * time.Minute), ArmedAt: t0, APIURL: "https://console.vast.ai"})
	api := &apiFaults{clk: clk}
	var log bytes.Buffer
	// A jitter at its middle leaves each wait as the policy says.
	err := RunDeadMan(ctx, DeadManOptions{Layout: l, Clock: clk, Log: &log, Destroy: api.destroy, Backoff: poll.Policy{Jitter: func() float64 { return 0.5 }}})
	if err != nil {
		t.Fatalf("the switch ended with %v\n%s", err, log.String())
	}
	if len(api.calls) != 31 || !api.urls["https://console.vast.ai"] || len(api.urls) != 1 {
		t.Fatalf("%d destroys to %v, want 31 to the armed API\n%s", len(api.calls), api.urls, log.String())
	}
	if first := api.calls[0]; first.Sub(lastBeat) <= 2*time.Minute || first.Sub(lastBeat) > 2*time.Minute+2*time.Second {
		t.Fatalf("fired %s after the last beat, want just past the 2m TTL", first.Sub(lastBeat))
	}
	// The waits between destroys grow, from 2 s, never past the cap (a
	// 429 may wait twice the cap).
	var gaps []time.Duration
	for i := 1; i < len(api.calls); i++ {
		gaps = append(gaps, api.calls[i].Sub(api.calls[i-1]))
	}
	if gaps[0] != 2*time.Second {
		t.Errorf("first retry after %s, want 2s", gaps[0])
	}
	for i, g := range gaps {
		if g > 2*time.Minute || (i > 0 && g < gaps[i-1]) {
			t.Fatalf("retry waits %v: not growing, or past the cap", gaps)
		}
	}
	if gaps[len(gaps)-1] != 2*time.Minute {
		t.Errorf("429s should back off to twice the 1m cap: %v", gaps)
	}
	for _, want := range []string{"no controller heartbeat for 2m", "destroy attempt 1 failed", "HTTP 503", "destroy attempt 30 failed", "HTTP 429",
		"destroy attempt 31: the API says this instance is gone", "next destroy in 2s"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
	if n := strings.Count(log.String(), "destroy attempt"); n != 31 {
		t.Errorf("%d attempts logged, want 31", n)
	}
	if len(*waits) == 0 {
		t.Fatal("the switch never waited")
	}
}

// A destroy the API accepts without the instance going (a no-op destroy)
// is sent again: only "no such instance" ends the switch.
func TestDeadManAsksAgainUntilGone(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	clk, ctx, _ := autoClock(t, t0, time.Hour, nil)
	armed(t, l, DeadManSpec{TTL: Duration(time.Minute), ArmedAt: t0, APIURL: "https://console.vast.ai"})
	calls := 0
	destroy := func(context.Context, string) (bool, error) {
		calls++
		if calls == 3 {
			return false, &provider.APIError{Status: 401, Code: "auth_error", Msg: "Invalid user key"} // refused: tried again too
		}
		return calls > 4, nil
	}
	var log bytes.Buffer
	if err := RunDeadMan(ctx, DeadManOptions{Layout: l, Clock: clk, Log: &log, Destroy: destroy}); err != nil || calls != 5 {
		t.Fatalf("err %v after %d destroys, want nil after 5\n%s", err, calls, log.String())
	}
	if !strings.Contains(log.String(), "destroy attempt 1 accepted; asking again") {
		t.Fatalf("log:\n%s", log.String())
	}
}

// The run's bound fires the switch even while the controller beats.
func TestDeadManBoundFires(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	clk, ctx, _ := autoClock(t, t0, 24*time.Hour, func(now time.Time) { touchHeartbeat(l, now) })
	armed(t, l, DeadManSpec{TTL: Duration(time.Minute), Bound: Duration(30 * time.Minute), ArmedAt: t0, APIURL: "https://console.vast.ai"})
	var at time.Time
	destroy := func(context.Context, string) (bool, error) { at = clk.Now(); return true, nil }
	var log bytes.Buffer
	if err := RunDeadMan(ctx, DeadManOptions{Layout: l, Clock: clk, Log: &log, Destroy: destroy}); err != nil {
		t.Fatal(err)
	}
	if d := at.Sub(t0); d < 30*time.Minute || d > 30*time.Minute+time.Second || !strings.Contains(log.String(), "bound 30m0s from arming passed") {
		t.Fatalf("fired %s after arming:\n%s", d, log.String())
	}
}

// A second arm (a resumed controller) changes the running switch: a
// longer TTL given before the first one ran out holds it off.
func TestDeadManReadsANewArm(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	rearmed := false
	clk, ctx, _ := autoClock(t, t0, 24*time.Hour, func(now time.Time) {
		if !rearmed && now.Sub(t0) >= 30*time.Second {
			rearmed = true
			armed(t, l, DeadManSpec{TTL: Duration(10 * time.Minute), ArmedAt: t0, APIURL: "https://console.vast.ai"})
		}
	})
	armed(t, l, DeadManSpec{TTL: Duration(time.Minute), ArmedAt: t0, APIURL: "https://console.vast.ai"})
	var at time.Time
	destroy := func(context.Context, string) (bool, error) { at = clk.Now(); return true, nil }
	var log bytes.Buffer
	if err := RunDeadMan(ctx, DeadManOptions{Layout: l, Clock: clk, Log: &log, Destroy: destroy}); err != nil {
		t.Fatal(err)
	}
	if d := at.Sub(t0); d <= 10*time.Minute || d > 10*time.Minute+2*time.Second || !strings.Contains(log.String(), "re-armed: TTL 10m0s") {
		t.Fatalf("fired %s after arming:\n%s", d, log.String())
	}
}

// Under the simulator the TTL is simulated time (never under SimMinLapse
// of wall time) and so is the backoff; elsewhere the variable changes
// nothing.
func TestSimClockSpeed(t *testing.T) {
	if SimClockSpeedEnv != sim.ClockSpeedEnv {
		t.Fatalf("the agent reads %s, the simulator sets %s", SimClockSpeedEnv, sim.ClockSpeedEnv)
	}
	env := func(v string) func(string) string {
		return func(k string) string { return map[string]string{SimClockSpeedEnv: v}[k] }
	}
	for _, tc := range []struct {
		v, url string
		want   float64
	}{
		{"60", "http://127.0.0.1:4321", 60},
		{"60", "http://localhost:4321", 60},
		{"60", "http://[::1]:4321", 60},
		{"60", "https://console.vast.ai", 1}, // a real API: never
		{"60", "http://10.0.0.5:80", 1},
		{"", "http://127.0.0.1:4321", 1},
		{"fast", "http://127.0.0.1:4321", 1},
		{"0.5", "http://127.0.0.1:4321", 1},
		{"+Inf", "http://127.0.0.1:4321", 1},
	} {
		if got := SimClockSpeed(env(tc.v), tc.url); got != tc.want {
			t.Errorf("%s=%q with %s: speed %g, want %g", SimClockSpeedEnv, tc.v, tc.url, got, tc.want)
		}
	}
	for _, tc := range []struct {
		ttl   time.Duration
		speed float64
		wall  time.Duration
	}{
		{3 * time.Minute, 1, 3 * time.Minute},
		{3 * time.Minute, 60, SimMinLapse},
		{5 * time.Minute, 5, time.Minute},
		{30 * time.Second, 60, SimMinLapse},
	} {
		if got := wallTTL(tc.ttl, tc.speed); got != tc.wall {
			t.Errorf("TTL %s at %gx: %s of wall time, want %s", tc.ttl, tc.speed, got, tc.wall)
		}
		if got := beatEvery(tc.ttl, tc.speed); got != tc.wall/3 {
			t.Errorf("TTL %s at %gx: beats every %s, want %s", tc.ttl, tc.speed, got, tc.wall/3)
		}
	}
}

// At 5x a 5m TTL fires after a minute of wall time, and the backoff
// after a failed destroy is a fifth of its simulated length.
func TestDeadManCountsSimulatedTime(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	clk, ctx, _ := autoClock(t, t0, time.Hour, nil)
	armed(t, l, DeadManSpec{TTL: Duration(5 * time.Minute), ArmedAt: t0, APIURL: "http://127.0.0.1:9"})
	var calls []time.Time
	destroy := func(context.Context, string) (bool, error) {
		calls = append(calls, clk.Now())
		if len(calls) == 1 {
			return false, &provider.APIError{Status: 503}
		}
		return true, nil
	}
	getenv := func(k string) string { return map[string]string{SimClockSpeedEnv: "5"}[k] }
	var log bytes.Buffer
	if err := RunDeadMan(ctx, DeadManOptions{Layout: l, Clock: clk, Log: &log, Destroy: destroy, Getenv: getenv, Backoff: poll.Policy{Jitter: func() float64 { return 0.5 }}}); err != nil {
		t.Fatal(err)
	}
	if d := calls[0].Sub(t0); d <= time.Minute || d > time.Minute+time.Second {
		t.Fatalf("fired after %s of wall time, want just past 1m (5m at 5x)\n%s", d, log.String())
	}
	if gap := calls[1].Sub(calls[0]); gap != 400*time.Millisecond {
		t.Fatalf("retried after %s of wall time, want 2s/5", gap)
	}
	if !strings.Contains(log.String(), "simulated time at 5x") || !strings.Contains(log.String(), "no controller heartbeat for 1m1s of wall time, 5m5s simulated (TTL 5m0s)") ||
		!strings.Contains(log.String(), "next destroy in 2s (simulated)") {
		t.Fatalf("log:\n%s", log.String())
	}
}

// Watch's own switch (agent watch --ttl) never gives up either.
func TestWatchSwitchNeverGivesUp(t *testing.T) {
	cs, dir := setup(t)
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	clk, ctx, _ := autoClock(t, t0, 24*time.Hour, nil)
	hb := t.TempDir() + "/heartbeat"
	os.WriteFile(hb, nil, 0o644)
	os.Chtimes(hb, t0, t0)
	calls := 0
	destroy := func(context.Context) (bool, error) {
		calls++
		return calls > 12, map[bool]error{true: &provider.APIError{Status: 503}}[calls <= 12]
	}
	var log bytes.Buffer
	err := Watch(ctx, Options{Checkpoints: cs, CheckpointDir: dir, HeartbeatFile: hb, TTL: time.Minute, Poll: 10 * time.Second, Clock: clk, Log: &log, SelfDestroy: destroy})
	if !errors.Is(err, ErrSelfDestroyed) || calls != 13 {
		t.Fatalf("%v after %d destroys, want ErrSelfDestroyed after 13\n%s", err, calls, log.String())
	}
}

// Arming starts one switch process and hands it the lock; a second arm
// finds it running and only rewrites its settings; a refresh beats and
// reports it, and says when nothing is armed.
func TestArmStartsOneSwitch(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	getenv := func(string) string { return "" }
	// The "switch" holds the lock it was handed on fd 3 until killed.
	exe, args := "/bin/sh", []string{"-c", "exec sleep 600"}
	r1, err := Arm(l, exe, args, nil, getenv, ArmRequest{TTL: Duration(3 * time.Minute), Bound: Duration(time.Hour), APIURL: "https://console.vast.ai", Run: "r1"}, now)
	if err != nil || !r1.Started || !r1.Armed || r1.PID == 0 || r1.BeatEvery != Duration(time.Minute) || r1.ClockSpeed != 1 {
		t.Fatalf("%+v %v", r1, err)
	}
	t.Cleanup(func() { syscall.Kill(r1.PID, syscall.SIGKILL) })
	r2, err := Arm(l, exe, args, nil, getenv, ArmRequest{TTL: Duration(6 * time.Minute), APIURL: "https://console.vast.ai"}, now.Add(time.Minute))
	if err != nil || r2.Started || !r2.Armed || r2.TTL != Duration(6*time.Minute) {
		t.Fatalf("a second arm: %+v %v", r2, err)
	}
	spec, err := readDeadManSpec(l)
	if err != nil || spec.TTL != Duration(6*time.Minute) || spec.Bound != 0 || !spec.ArmedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("settings after the second arm: %+v %v", spec, err)
	}
	r3, err := Arm(l, exe, args, nil, getenv, ArmRequest{Refresh: true}, now.Add(2*time.Minute))
	fi, serr := os.Stat(l.Abs(Heartbeat))
	if err != nil || serr != nil || !r3.Armed || r3.TTL != Duration(6*time.Minute) || !fi.ModTime().Equal(now.Add(2*time.Minute)) {
		t.Fatalf("refresh: %+v %v %v", r3, err, serr)
	}
	r4, err := Arm(Layout{Home: t.TempDir()}, exe, args, nil, getenv, ArmRequest{Refresh: true}, now)
	if err != nil || r4.Armed || r4.Started {
		t.Fatalf("refresh of an instance never armed: %+v %v", r4, err)
	}
}

// An arm request is checked before anything is armed, and its answer is
// held to its schema.
func TestArmRequestAndAnswer(t *testing.T) {
	for _, r := range []ArmRequest{{}, {TTL: -1, APIURL: "x"}, {TTL: Duration(time.Minute)}, {TTL: Duration(time.Minute), Bound: -1, APIURL: "x"}} {
		if err := r.check(); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if err := (ArmRequest{Refresh: true}).check(); err != nil {
		t.Error(err)
	}
	for _, doc := range []string{
		`{"schema":"vastrun.agent.arm","schema_version":2,"armed":true,"ttl":"3m","beat_every":"1m","clock_speed":1}`,
		`{"schema":"vastrun.agent.arm","schema_version":1,"armed":true,"ttl":"3m","clock_speed":1}`,
		`{"schema":"vastrun.agent.start","schema_version":1}`,
	} {
		if _, err := DecodeArm([]byte(doc)); !errors.Is(err, ErrSchema) {
			t.Errorf("%s: %v", doc, err)
		}
	}
	ok := fmt.Sprintf(`{"schema":%q,"schema_version":1,"armed":true,"ttl":"3m0s","beat_every":"1m0s","clock_speed":1}`, ArmSchema)
	if r, err := DecodeArm([]byte(ok)); err != nil || r.TTL != Duration(3*time.Minute) {
		t.Fatalf("%+v %v", r, err)
	}
}

// By default the retries are spread (±20%), so the switches of many
// instances whose controller died at once do not retry in step.
func TestDeadManRetriesAreJittered(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	var calls []time.Time
	destroy := func(context.Context) (bool, error) {
		calls = append(calls, clk.Now())
		if len(calls) <= 12 {
			return false, &provider.APIError{Status: 503}
		}
		return true, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- DestroyUntilGone(ctx, DeadManOptions{Clock: clk}, destroy, "test", 1) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			off := 0
			for i := 1; i < len(calls); i++ {
				want := min(2*time.Second<<(i-1), time.Minute)
				gap := calls[i].Sub(calls[i-1])
				if gap < want*8/10-10*time.Millisecond || gap > want*12/10+10*time.Millisecond {
					t.Fatalf("wait %d is %s, want %s ±20%%", i, gap, want)
				}
				if gap != want {
					off++
				}
			}
			if off == 0 {
				t.Fatalf("no wait was spread: %v", calls)
			}
			return
		default:
			if clk.Waiters() > 0 {
				clk.Advance(10 * time.Millisecond)
			} else {
				runtime.Gosched()
			}
		}
	}
}
