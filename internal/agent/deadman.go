package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/poll"
)

// The dead-man switch of every rental (ci, canary, up, train): `agent arm`
// (an `agent call` with an ArmRequest) starts a detached `agent deadman`
// on the instance, which destroys the instance with its own
// CONTAINER_API_KEY once the controller's heartbeat (touched over the
// `agent heartbeat --serve` channel, or by arming) is older than the TTL,
// or once the run's own bound, counted from arming, has passed. A
// controller that dies for any reason (SIGKILL, a lost CI runner, a closed
// laptop) therefore leaves its instance running for at most the TTL.
//
// Once fired, the switch never gives up: the destroy is sent again with
// capped, jittered exponential backoff (poll.Until, 429s waiting longer:
// Vast sends no Retry-After) until the API answers that the instance does
// not exist, every attempt logged to AgentLog. It does not stop the
// instance when destroys keep failing: stopping a container ends every
// process in it, this one included, and a stopped instance, which still
// bills storage, would then have nothing left to destroy it.
const (
	// Binary is where the controller copies this vastrun to, as the agent.
	Binary = ".vastrun/bin/vastrun"
	// DeadManFile holds the armed switch's settings (DeadManSpec), written
	// by every arm and read by the switch on every look.
	DeadManFile = ".vastrun/deadman.json"
	// DeadManLock is held by the running switch for its whole life.
	DeadManLock = ".vastrun/deadman.lock"

	// SimClockSpeedEnv is set by vastrun's simulator, and only by it, in
	// every instance's environment: how many simulated seconds pass per
	// wall second. The switch then counts its TTL in simulated time, as the
	// simulator bills, but only when its API is on a loopback address (the
	// simulator; Vast never is), so the variable can change nothing on a
	// real instance.
	SimClockSpeedEnv = "VASTRUN_SIM_CLOCK_SPEED"
	// SimMinLapse is the shortest heartbeat lapse, in wall time, that fires
	// the switch under a faster simulated clock: the controller and the
	// instance's processes run on the wall clock, and a loaded test machine
	// can stall them for seconds (3 simulated minutes at 60x are 3 s).
	SimMinLapse = 30 * time.Second
)

// DeadManSpec is what arming wrote: the switch reads it on every look, so a
// second arm (a resumed controller) changes a running switch.
type DeadManSpec struct {
	TTL Duration `json:"ttl"`
	// Bound is the run's own deadline, counted on the wall clock from
	// ArmedAt (0: none).
	Bound   Duration  `json:"bound,omitempty"`
	ArmedAt time.Time `json:"armed_at"`
	// APIURL is the marketplace the destroy goes to.
	APIURL string `json:"api_url"`
	Run    string `json:"run,omitempty"`
}

// SimClockSpeed is the simulated clock's speed the switch counts its TTL
// in: the value of SimClockSpeedEnv when it is a number above 1 and the
// API is on a loopback address, else 1 (the wall clock).
func SimClockSpeed(getenv func(string) string, apiURL string) float64 {
	v, err := strconv.ParseFloat(getenv(SimClockSpeedEnv), 64)
	if err != nil || v <= 1 || math.IsInf(v, 0) || math.IsNaN(v) || !LoopbackURL(apiURL) {
		return 1
	}
	return v
}

// LoopbackURL says apiURL names a loopback host: a simulator, never Vast.
func LoopbackURL(apiURL string) bool {
	u, err := url.Parse(apiURL)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// wallTTL is the heartbeat lapse, in wall time, that fires the switch.
func wallTTL(ttl time.Duration, speed float64) time.Duration {
	if speed <= 1 {
		return ttl
	}
	return max(time.Duration(float64(ttl)/speed), SimMinLapse)
}

// beatEvery is how often a controller must beat (wall time): a third of
// the lapse that fires the switch, so one lost beat, or a redial, never
// lets it fire.
func beatEvery(ttl time.Duration, speed float64) time.Duration {
	return max(wallTTL(ttl, speed)/3, 100*time.Millisecond)
}

// armResult is the answer for spec with the switch's speed.
func armResult(spec DeadManSpec, speed float64) ArmResult {
	return ArmResult{Schema: ArmSchema, SchemaVersion: SchemaVersion, Armed: true, TTL: spec.TTL, Bound: spec.Bound,
		BeatEvery: Duration(beatEvery(time.Duration(spec.TTL), speed)), ClockSpeed: speed}
}

// readDeadManSpec reads the armed switch's settings (nil: not armed).
func readDeadManSpec(l Layout) (*DeadManSpec, error) {
	b, err := os.ReadFile(l.Abs(DeadManFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s DeadManSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s is unreadable: %w", DeadManFile, err)
	}
	return &s, nil
}

// Arm arms the switch for r at now (wall): it writes its settings, counts
// the arming as a beat, and starts `exe args` (which must run `agent
// deadman`) detached, unless a switch already runs here, which then reads
// the new settings at its next look. With r.Refresh it only beats and
// reports the armed switch (Armed false when there is none).
func Arm(l Layout, exe string, args, env []string, getenv func(string) string, r ArmRequest, now time.Time) (ArmResult, error) {
	return ArmWith(l, execSwitch(l, exe, args, env), getenv, r, now)
}

// SwitchStarter starts the switch (RunDeadMan) detached from the arm
// request, handing it lock, the switch's lock, which it must hold for the
// switch's whole life and close (release) when the switch ends; it
// returns the switch's process id. It owns lock from the call on, even
// when it fails.
type SwitchStarter func(lock *os.File) (pid int, err error)

// ArmWith is Arm with the switch started by start: Arm's starts a process
// of its own (`agent deadman`); a test harness may run the switch in
// process, on its own clock, through the same arming.
func ArmWith(l Layout, start SwitchStarter, getenv func(string) string, r ArmRequest, now time.Time) (ArmResult, error) {
	if r.Refresh {
		spec, err := readDeadManSpec(l)
		if err != nil || spec == nil {
			return ArmResult{Schema: ArmSchema, SchemaVersion: SchemaVersion}, err
		}
		if _, err := touchHeartbeat(l, now); err != nil {
			return ArmResult{}, fmt.Errorf("agent arm: %w", err)
		}
		return armResult(*spec, SimClockSpeed(getenv, spec.APIURL)), nil
	}
	spec := DeadManSpec{TTL: r.TTL, Bound: r.Bound, ArmedAt: now.UTC(), APIURL: r.APIURL, Run: r.Run}
	if err := os.MkdirAll(l.Abs(StateDir), 0o755); err != nil {
		return ArmResult{}, fmt.Errorf("agent arm: %w", err)
	}
	b, _ := json.Marshal(spec)
	if err := writeAtomic(l.Abs(DeadManFile), b); err != nil {
		return ArmResult{}, fmt.Errorf("agent arm: write %s: %w", DeadManFile, err)
	}
	if _, err := touchHeartbeat(l, now); err != nil {
		return ArmResult{}, fmt.Errorf("agent arm: %w", err)
	}
	res := armResult(spec, SimClockSpeed(getenv, spec.APIURL))
	lf, held, err := lockFile(l, DeadManLock)
	if err != nil {
		return ArmResult{}, fmt.Errorf("agent arm: lock %s: %w", DeadManLock, err)
	}
	if held {
		return res, nil // the running switch reads the new settings
	}
	pid, err := start(lf)
	if err != nil {
		return ArmResult{}, fmt.Errorf("agent arm: %w", err)
	}
	res.Started, res.PID = true, pid
	return res, nil
}

// execSwitch starts `exe args` in a session of its own, logging to
// AgentLog, the lock on its fd 3.
func execSwitch(l Layout, exe string, args, env []string) SwitchStarter {
	return func(lf *os.File) (int, error) {
		defer lf.Close() //nolint:errcheck // the switch holds its own copy of the lock
		logf, err := os.OpenFile(l.Abs(AgentLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return 0, err
		}
		defer logf.Close() //nolint:errcheck // the switch writes through its own copy
		cmd := exec.Command(exe, args...)
		cmd.Dir, cmd.Env = l.Home, env
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.ExtraFiles = []*os.File{lf} // fd 3: the lock, handed over for the switch's life
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("start the switch: %w", err)
		}
		pid := cmd.Process.Pid
		cmd.Process.Release() //nolint:errcheck // the switch is never waited for: it outlives this call
		return pid, nil
	}
}

// lockFile takes the lock at name without waiting; held reports that
// another process has it.
func lockFile(l Layout, name string) (*os.File, bool, error) {
	f, err := os.OpenFile(l.Abs(name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() //nolint:errcheck // the lock was not taken: nothing to release
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, err
	}
	return f, false, nil
}

// DeadManOptions configure RunDeadMan.
type DeadManOptions struct {
	Layout Layout
	// Clock is the wall clock (a fake one in tests); the TTL and the
	// destroy's backoff run Speed times faster.
	Clock clock.Clock
	Log   io.Writer
	// Destroy sends one destroy of this instance, with its own key, to
	// the API at apiURL; gone reports that the API answered that the
	// instance does not exist.
	Destroy func(ctx context.Context, apiURL string) (gone bool, err error)
	// Getenv reads the switch's environment (SimClockSpeedEnv).
	Getenv func(string) string
	// Poll is how often the heartbeat is looked at (default 1 s, wall).
	Poll time.Duration
	// Backoff shapes the destroy's retries (default: 2 s growing to 1 min,
	// ±20% jitter; a 429 doubles the wait); Permanent and Deadline are
	// ignored: the switch never gives up.
	Backoff poll.Policy
}

// ErrNotArmed means the switch was started on an instance never armed.
var ErrNotArmed = errors.New("the dead-man switch is not armed on this instance")

// RunDeadMan is the switch's life: it looks at the heartbeat every Poll
// until it lapses past the TTL or the bound passes, then destroys the
// instance until the API says it is gone (the destroy usually ends this
// process first, with the container). It returns nil once gone, or when
// ctx ends.
func RunDeadMan(ctx context.Context, o DeadManOptions) error {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	spec, err := readDeadManSpec(o.Layout)
	if err != nil {
		return err
	}
	if spec == nil {
		return ErrNotArmed
	}
	speed := SimClockSpeed(o.Getenv, spec.APIURL)
	logf(o, "dead-man switch armed: TTL %s%s%s", time.Duration(spec.TTL), boundWords(*spec), speedWords(speed))
	for {
		if s, err := readDeadManSpec(o.Layout); err == nil && s != nil {
			if *s != *spec {
				logf(o, "dead-man switch re-armed: TTL %s%s", time.Duration(s.TTL), boundWords(*s))
			}
			spec = s
		}
		if why := deadManWhy(o.Layout, *spec, speed, o.Clock.Now()); why != "" {
			var destroy func(context.Context) (bool, error)
			if o.Destroy != nil {
				url := spec.APIURL
				destroy = func(ctx context.Context) (bool, error) { return o.Destroy(ctx, url) }
			}
			return DestroyUntilGone(ctx, o, destroy, why, speed)
		}
		if err := clock.Sleep(ctx, o.Clock, o.Poll); err != nil {
			return nil
		}
	}
}

func boundWords(s DeadManSpec) string {
	if s.Bound <= 0 {
		return ", no bound"
	}
	return fmt.Sprintf(", bound %s from %s", time.Duration(s.Bound), s.ArmedAt.Format(time.RFC3339))
}

func speedWords(speed float64) string {
	if speed <= 1 {
		return ""
	}
	return fmt.Sprintf(" (simulated time at %gx, never under %s of wall time)", speed, SimMinLapse)
}

// deadManWhy says why the switch fires at now, or "". The bound is counted
// on the wall clock (it is the controller's, whatever the simulator's
// speed), the TTL in the instance's time.
func deadManWhy(l Layout, s DeadManSpec, speed float64, now time.Time) string {
	if s.Bound > 0 && !now.Before(s.ArmedAt.Add(time.Duration(s.Bound))) {
		return fmt.Sprintf("the run's bound %s from arming passed", time.Duration(s.Bound))
	}
	if s.TTL <= 0 {
		return ""
	}
	last := s.ArmedAt
	if fi, err := os.Stat(l.Abs(Heartbeat)); err == nil && fi.ModTime().After(last) {
		last = fi.ModTime()
	}
	if lapse := now.Sub(last); lapse > wallTTL(time.Duration(s.TTL), speed) {
		if speed > 1 {
			return fmt.Sprintf("no controller heartbeat for %s of wall time, %s simulated (TTL %s)", lapse.Round(time.Second), scaled(lapse, speed).Round(time.Second), time.Duration(s.TTL))
		}
		return fmt.Sprintf("no controller heartbeat for %s (TTL %s)", lapse.Round(time.Second), time.Duration(s.TTL))
	}
	return ""
}

func scaled(d time.Duration, speed float64) time.Duration {
	return time.Duration(float64(d) * max(speed, 1))
}

// speedClock runs waits speed times faster than c (the simulator's time).
type speedClock struct {
	c     clock.Clock
	speed float64
}

func (s speedClock) Now() time.Time { return s.c.Now() }
func (s speedClock) After(d time.Duration) <-chan time.Time {
	return s.c.After(time.Duration(float64(d) / max(s.speed, 1)))
}

// DestroyUntilGone fires the switch: it destroys the instance, again and
// again with backoff, until the API says it is gone (nil) or ctx ends (its
// error). It never gives up otherwise, whatever the API answers: a key the
// API refuses, or a destroy it accepts without the instance going, is
// tried again. Every attempt is logged.
func DestroyUntilGone(ctx context.Context, o DeadManOptions, destroy func(context.Context) (bool, error), why string, speed float64) error {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	logf(o, "%s: destroying this instance with its own key (CONTAINER_API_KEY), until the API says it is gone", why)
	if destroy == nil {
		// Nothing can destroy it: say so at every try, never exit.
		destroy = func(context.Context) (bool, error) {
			return false, errors.New("this agent has no way to destroy its instance")
		}
	}
	p := o.Backoff
	if p.Initial <= 0 {
		p.Initial = 2 * time.Second
	}
	if p.Max <= 0 {
		p.Max = time.Minute
	}
	if p.Jitter == nil {
		// Spread the retries of many switches firing at once (a lost CI
		// runner's whole matrix): Vast's 429s carry no Retry-After.
		p.Jitter = rand.Float64
	}
	p.Deadline = time.Time{}
	p.Permanent = func(error) bool { return false } // never give up
	sim := ""
	if speed > 1 {
		sim = " (simulated)"
	}
	p.Notify = func(_ error, wait time.Duration) { // wait is in the instance's time
		logf(o, "dead-man switch: next destroy in %s%s", wait.Round(time.Millisecond), sim)
	}
	attempt := 0
	err := poll.Until(ctx, speedClock{o.Clock, speed}, p, func(ctx context.Context) (bool, error) {
		attempt++
		gone, err := destroy(ctx)
		switch {
		case err != nil:
			logf(o, "dead-man switch: destroy attempt %d failed: %v", attempt, err)
			return false, err
		case gone:
			logf(o, "dead-man switch: destroy attempt %d: the API says this instance is gone", attempt)
			return true, nil
		}
		logf(o, "dead-man switch: destroy attempt %d accepted; asking again until the API says it is gone", attempt)
		return false, nil
	})
	if err != nil {
		logf(o, "dead-man switch stopped before the instance was gone: %v", err)
	}
	return err
}

func logf(o DeadManOptions, format string, args ...any) {
	fmt.Fprintf(o.Log, "%s vastrun agent: %s\n", o.Clock.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...)) //nolint:errcheck // the log is the only place to tell; the switch goes on without it
}
