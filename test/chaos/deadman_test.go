package chaos

// The deadman family: no rental outlives its controller. Each schedule
// runs a random workflow (ci, canary or train) against the simulator with
// the ci family's random API and SSH faults, and kills its controller at a
// random moment: the Nth call it makes to the marketplace or to the
// instance's dead-man switch, before that call or just after it was
// answered (the answer lost with the process). Killed means SIGKILL:
// nothing of the controller runs again — every later call, clock wait and
// heartbeat of any of its goroutines blocks forever — and nothing is torn
// down. A run that ends before its Nth call exits instead; what it left
// live (a teardown it could not confirm) is treated alike.
//
// Then the API fails destroys — 5xx and 429 answers from the simulator,
// transport errors (refused, or the answer lost after the destroy reached
// the API) and destroys accepted that do nothing, each for a random number
// of calls, in a random order — and the instance's own dead-man switch
// takes over: the agent's real switch (agent.RunDeadMan, armed by
// agent.ArmWith from the engine's real DeadMan step), run in process on
// the simulator's clock, destroying through the vast client with the
// instance's own CONTAINER_API_KEY, as `vastrun agent deadman` does on an
// instance. The harness starts the switch's loop at the controller's end,
// with the controller's last beat at that instant (the latest it can be:
// the beats themselves are tested in internal/agent and the scripts); the
// switches share the simulator's clock, which moves only while all of
// them wait. A switch ends with its container, as the process does: when
// its destroy lands (the instance's key goes with the instance, so the
// API would answer it 401, never "no such instance"), or when the
// container stops (a preempted instance).
//
// An instance the switch cannot cover — the controller died before arming
// it, or its container stopped — is left to `down`, which the harness runs
// (as the operator would, once the API behaves) and which must destroy it.
// After every schedule:
//
//   - zero live instances;
//   - every instance armed, running and live at the controller's end was
//     destroyed by its own key (the simulator records whose destroy ended
//     it), by its switch, which never stopped before;
//   - the switch fired no earlier than the TTL after the last beat (or the
//     run's bound), and the instance was gone, and billed no more, within
//     the TTL, one look and the capped backoff for the destroys that failed;
//   - every attempt is in the switch's log;
//   - only unarmed or stopped instances were left to `down`, and it
//     destroyed them with the account's key;
//   - never two live contracts for one label.
//
//	go test ./test/chaos -run TestChaosDeadMan -deadman-seeds 300 -v
//
// -deadman-mutate breaks the harness's switch on purpose, to see that each
// kind of violation is caught (see dmMutations).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/workflow/canary"
	"github.com/vastrun/vastrun/internal/workflow/ci"
	trainflow "github.com/vastrun/vastrun/internal/workflow/train"
)

var (
	deadmanSeeds  = seedCount("deadman-seeds", envDeadManSeeds, 30, "randomized schedules whose controller dies while the API fails destroys")
	deadmanMutate = flag.String("deadman-mutate", "", "break the deadman family's switch on purpose to see it caught: one of "+strings.Join(dmMutations, ", "))
	deadmanDebug  = flag.Bool("deadman-debug", false, "print every deadman schedule's outcome and, on a violation, the switches' logs")
)

// dmMutations are the ways -deadman-mutate breaks the harness, one per
// kind of violation the family checks.
var dmMutations = []string{
	"give-up",     // the switch stops after its first failed destroy: instances stay live
	"account-key", // the switch destroys with the account's key, not the instance's
	"slow",        // the switch's backoff starts at, and is capped at, an hour: billed past the bound
	"early",       // the switch reads half the armed TTL: it fires early
	"no-start",    // arming writes the settings but starts no switch: armed, yet left to down
	"no-down",     // nobody runs down: what the switch cannot cover stays live
	"quiet",       // the switch's attempts are not logged
}

// dmPoll is how often the switch looks at the heartbeat (its default).
const dmPoll = time.Second

// dmBackoffBound is the longest the switch's destroys can take past the
// first after `waits` waits: each wait at most doubles from 2 s, a 429
// doubles it once more, never past twice the 1 min cap, and 20% is room
// for jitter.
func dmBackoffBound(waits int) time.Duration {
	var d time.Duration
	w := 4 * time.Second
	for range waits {
		d += w * 12 / 10
		w = min(2*w, 2*time.Minute)
	}
	return d
}

func TestChaosDeadMan(t *testing.T) {
	if *deadmanMutate != "" && !slices.Contains(dmMutations, *deadmanMutate) {
		t.Fatalf("-deadman-mutate %q: want one of %v", *deadmanMutate, dmMutations)
	}
	st := newDMStats()
	defer func() { st.print() }()
	runFamily(t, "deadman", *deadmanSeeds, func(seed uint64) ([]string, string) {
		t0 := time.Now()
		v, summary := runDeadMan(t, seed, randomDMSchedule(seed), *deadmanMutate, st)
		if *deadmanDebug {
			fmt.Printf("deadman seed %d (%.1fs): %s: %d violations\n", seed, time.Since(t0).Seconds(), summary, len(v))
		}
		return v, summary
	})
}

// TestChaosDeadManCatches breaks the harness's switch in each way of
// -deadman-mutate on a schedule where it must show, and checks that the
// family reports the violation; unbroken, the same schedules pass and are
// covered as meant: a ci run killed just after the switch was armed, every
// kind of destroy failure met, and one killed just after its create
// answered, before arming, left to down.
func TestChaosDeadManCatches(t *testing.T) {
	armed := dmSchedule{flow: "ci", ttl: 3 * time.Minute, crashOn: "arm", after: true,
		destroys: dmFaults{n429: 2, n5xx: 3, status: 503, nNoop: 1, net: map[int]bool{2: false, 4: true}}}
	unarmed := dmSchedule{flow: "ci", ttl: 3 * time.Minute, crashOn: "create", after: true}
	type dmCase struct {
		mutate string
		sc     dmSchedule
		want   string // in a violation; "" for none
	}
	cases := []dmCase{
		{"", armed, ""},
		{"", unarmed, ""},
		{"give-up", armed, "is still live"},
		{"account-key", armed, "not by its own key"},
		{"slow", armed, "past the TTL and the backoff"},
		{"early", armed, "its switch fired 1m31s after the controller's end, want 3m0s"},
		{"no-start", armed, "no switch runs there"},
		{"no-down", unarmed, "1 live instances at the end"},
		{"quiet", armed, "8 destroys sent, 0 in the switch's log"},
	}
	for _, m := range dmMutations {
		if !slices.ContainsFunc(cases, func(c dmCase) bool { return c.mutate == m }) {
			t.Errorf("mutation %s is not checked here", m)
		}
	}
	for _, c := range cases {
		name := c.mutate
		if name == "" {
			name = "unbroken_" + c.sc.crashOn
		}
		t.Run(name, func(t *testing.T) {
			st := newDMStats()
			v, summary := runDeadMan(t, 1, c.sc, c.mutate, st)
			all := strings.Join(v, "; ")
			switch {
			case c.want != "" && !strings.Contains(all, c.want):
				t.Fatalf("%s: broken by %s, the family reported %q, want a violation saying %q", summary, c.mutate, all, c.want)
			case c.want != "":
			case len(v) > 0:
				t.Fatalf("%s: %s", summary, all)
			case c.sc.crashOn == "arm" && (st.switched != 1 || st.attempts != 8 || st.failed429 != 2 || st.failed503 != 2 || st.failedNet != 2 || st.lost != 1 || st.accepted != 2):
				// 429, refused, 429, lost (it met the first 503), 503,
				// 503, the no-op and the destroy that landed (accepted).
				t.Fatalf("%s: not covered as meant: %+v", summary, st)
			case c.sc.crashOn == "create" && (st.switched != 0 || st.left["never armed"] != 1):
				t.Fatalf("%s: not covered as meant: %+v", summary, st)
			}
		})
	}
}

// dmStats is what the schedules covered, printed after the family.
type dmStats struct {
	mu                              sync.Mutex
	flows                           map[string]int
	killed, exited                  int
	killedArming                    int // died inside an arm call
	switched, fired                 int // instances the switch covered / fired on
	attempts, maxTries              int // destroys the switches sent
	failed503, failed429, failedNet int // destroys that failed, by kind
	failedOther                     int
	lost, accepted                  int            // transport failures after the destroy landed / destroys answered success
	left                            map[string]int // instances left to down, by why
	boundFired                      int            // switches fired by the run's bound before the TTL
}

func newDMStats() *dmStats { return &dmStats{flows: map[string]int{}, left: map[string]int{}} }

func (s *dmStats) print() {
	s.mu.Lock()
	defer s.mu.Unlock()
	flows := []string{}
	for f, n := range s.flows {
		flows = append(flows, fmt.Sprintf("%s %d", f, n))
	}
	sort.Strings(flows)
	fmt.Printf("chaos deadman covered: %s; controller killed %d (inside an arm %d), exited %d; switch covered %d instances, fired on %d (by the run's bound %d), "+
		"%d destroys (most %d for one instance): %d answered 5xx, %d 429, %d transport errors (%d after the destroy landed), %d other, %d accepted (the one that landed, and no-ops); left to down: %v\n",
		strings.Join(flows, ", "), s.killed, s.killedArming, s.exited, s.switched, s.fired, s.boundFired,
		s.attempts, s.maxTries, s.failed503, s.failed429, s.failedNet, s.lost, s.failedOther, s.accepted, s.left)
}

// killer is the controller's process: it dies (SIGKILL) at its crashAt-th
// call to the marketplace or the switch, before the call, or after it was
// answered when after is set. From then on every call of any of its
// goroutines blocks forever, as does every wait on its clock.
type killer struct {
	crashAt int
	// on, when set, sets crashAt at the first call named on: afterOn
	// calls after it (0: that call itself).
	on       string
	afterOn  int
	after    bool
	firstArm int // the first arm's call number
	mu       sync.Mutex
	cond     *sync.Cond
	n        int
	inflight int
	dead     bool
	at       string
	died     chan struct{}
}

func newKiller(crashAt int, on string, afterOn int, after bool) *killer {
	k := &killer{crashAt: crashAt, on: on, afterOn: afterOn, after: after, died: make(chan struct{})}
	k.cond = sync.NewCond(&k.mu)
	return k
}

// freeze is a killed process: nothing after it runs.
func freeze() { select {} }

func (k *killer) dieLocked(at string) {
	if !k.dead {
		k.dead, k.at = true, at
		close(k.died)
	}
}

// call makes one call of the controller's, which may be the one it dies at.
func (k *killer) call(what string, fn func()) {
	k.mu.Lock()
	if k.dead {
		k.mu.Unlock()
		freeze()
	}
	k.n++
	n := k.n
	if what == "arm" && k.firstArm == 0 {
		k.firstArm = n
	}
	if what == k.on && k.crashAt == 0 {
		k.crashAt = n + k.afterOn
	}
	if n == k.crashAt && !k.after {
		k.dieLocked(fmt.Sprintf("%s #%d, before it was sent", what, n))
		k.mu.Unlock()
		freeze()
	}
	k.inflight++
	k.mu.Unlock()
	fn()
	k.mu.Lock()
	k.inflight--
	k.cond.Broadcast()
	if n == k.crashAt {
		k.dieLocked(fmt.Sprintf("%s #%d, after it was answered", what, n))
	}
	if k.dead { // its answer reaches no one
		k.mu.Unlock()
		freeze()
	}
	k.mu.Unlock()
}

// kill ends the process (a run that returned exits), if it still lives,
// and waits for the calls it had in flight to be answered: what they did
// is done, and nothing of the controller moves after.
func (k *killer) kill(why string) (killed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	killed = k.dead
	k.dieLocked(why)
	for k.inflight > 0 {
		k.cond.Wait()
	}
	return killed
}

func (k *killer) isDead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

// dmClock is the run's clock: the simulator's, moved on by every wait
// the controller makes shorter than dmLongWait (its polls and backoffs, as
// autoClock does); a longer one (a step's timeout) fires only when the
// shorter ones have brought the clock there.
type dmClock struct{ f *clock.Fake }

const dmLongWait = 5 * time.Minute

func (c dmClock) Now() time.Time { return c.f.Now() }
func (c dmClock) After(d time.Duration) <-chan time.Time {
	ch := c.f.After(d)
	if d < dmLongWait {
		c.f.Advance(d)
	}
	return ch
}

// deadClock is the controller's clock: a dead controller waits forever.
type deadClock struct {
	c clock.Clock
	k *killer
}

func (d deadClock) Now() time.Time { return d.c.Now() }
func (d deadClock) After(x time.Duration) <-chan time.Time {
	if d.k.isDead() {
		return nil
	}
	return d.c.After(x)
}

// killMarket is the controller's marketplace, every call through the killer.
type killMarket struct {
	provider.Market
	k *killer
}

func (m killMarket) SearchOffers(ctx context.Context, q provider.Query) (o []provider.Offer, err error) {
	m.k.call("search", func() { o, err = m.Market.SearchOffers(ctx, q) })
	return o, err
}
func (m killMarket) CreateInstance(ctx context.Context, r provider.CreateRequest) (c provider.CreateResult, err error) {
	m.k.call("create", func() { c, err = m.Market.CreateInstance(ctx, r) })
	return c, err
}
func (m killMarket) ShowInstance(ctx context.Context, id provider.InstanceID) (in provider.Instance, err error) {
	m.k.call("show", func() { in, err = m.Market.ShowInstance(ctx, id) })
	return in, err
}
func (m killMarket) ListInstances(ctx context.Context, o provider.ListOptions) (l []provider.Instance, err error) {
	m.k.call("list", func() { l, err = m.Market.ListInstances(ctx, o) })
	return l, err
}
func (m killMarket) DestroyInstance(ctx context.Context, id provider.InstanceID) (err error) {
	m.k.call("destroy", func() { err = m.Market.DestroyInstance(ctx, id) })
	return err
}
func (m killMarket) AttachSSHKey(ctx context.Context, id provider.InstanceID, key string) (err error) {
	m.k.call("attach_ssh", func() { err = m.Market.AttachSSHKey(ctx, id, key) })
	return err
}
func (m killMarket) Charges(ctx context.Context, q provider.ChargeQuery) (c []provider.Charge, err error) {
	m.k.call("charges", func() { c, err = m.Market.Charges(ctx, q) })
	return c, err
}

// ChangeBid forwards the change-bid route (see crashMarket.ChangeBid).
func (m killMarket) ChangeBid(ctx context.Context, id provider.InstanceID, price float64) (err error) {
	m.k.call("change_bid", func() {
		bc, ok := m.Market.(provider.BidChanger)
		if !ok {
			err = fmt.Errorf("change the bid of instance %d: the wrapped market has no change-bid route", id)
			return
		}
		err = bc.ChangeBid(ctx, id, price)
	})
	return err
}

// dmArmed is a switch that arming started: the instance's files (its
// workspace, as `agent deadman` runs in it) and the lock it holds.
type dmArmed struct {
	id     provider.InstanceID
	layout agent.Layout
	lock   *os.File
}

// dmSwitch is the instances' dead-man switch as the engine drives it
// (lifecycle.Switch): one SSH round trip, so the schedule's SSH faults
// reach arming as they reach the real one, then the agent's own arming
// (agent.ArmWith) on the instance's files, on the simulator's clock, whose
// switch the harness runs once the controller is gone. For training the
// agent binary is linked in where the real switch copies it.
type dmSwitch struct {
	k      *killer
	s      *sim.Server
	clk    clock.Clock // the instance's (the simulator's)
	bin    string
	mutate string

	mu      sync.Mutex
	started map[provider.InstanceID]*dmArmed
}

func (w *dmSwitch) layout(id provider.InstanceID) (agent.Layout, error) {
	snap := w.s.Snapshot()
	for _, in := range append(snap.Live, snap.Gone...) {
		if in.ID == int64(id) {
			return agent.Layout{Home: filepath.Join(in.Sandbox, "workspace")}, nil
		}
	}
	return agent.Layout{}, fmt.Errorf("instance %d is not in the simulator", id)
}

func (w *dmSwitch) Arm(ctx context.Context, c *remote.Client, id provider.InstanceID, req agent.ArmRequest) (res agent.ArmResult, err error) {
	w.k.call("arm", func() {
		if err = c.Run(ctx, remote.Command{Script: "mkdir -p " + filepath.Dir(agent.Binary)}); err != nil {
			return
		}
		var l agent.Layout
		if l, err = w.layout(id); err != nil {
			return
		}
		if w.bin != "" && !req.Refresh {
			if err = os.Symlink(w.bin, l.Abs(agent.Binary)); errors.Is(err, os.ErrExist) {
				err = nil
			}
			if err != nil {
				return
			}
		}
		start := func(lock *os.File) (int, error) {
			if w.mutate == "no-start" {
				lock.Close()
				return 1, nil
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			w.started[id] = &dmArmed{id: id, layout: l, lock: lock}
			return 1000 + int(id), nil
		}
		res, err = agent.ArmWith(l, start, func(string) string { return "" }, req, w.clk.Now())
	})
	return res, err
}

// OpenHeartbeat serves the controller's beats with the agent's own server
// on the instance's clock; a dead controller beats no more.
func (w *dmSwitch) OpenHeartbeat(ctx context.Context, _ *remote.Client, id provider.InstanceID) (agent.HeartbeatPipe, error) {
	if w.k.isDead() {
		freeze()
	}
	l, err := w.layout(id)
	if err != nil {
		return nil, err
	}
	reqR, reqW := io.Pipe()
	ansR, ansW := io.Pipe()
	go func() { ansW.CloseWithError(agent.ServeHeartbeat(l, reqR, ansW, w.clk)) }()
	return &dmPipe{k: w.k, r: ansR, w: reqW}, nil
}

type dmPipe struct {
	k *killer
	r *io.PipeReader
	w *io.PipeWriter
}

func (p *dmPipe) Read(b []byte) (int, error) { return p.r.Read(b) }
func (p *dmPipe) Write(b []byte) (int, error) {
	if p.k.isDead() {
		freeze()
	}
	return p.w.Write(b)
}
func (p *dmPipe) Close() error {
	p.w.Close()
	return p.r.Close()
}

// switchTime runs the switches on the simulator's clock as processes
// sharing it: time moves only while every switch still running waits, and
// then to the earliest of their waits.
type switchTime struct {
	f      *clock.Fake
	mu     sync.Mutex
	cond   *sync.Cond
	active int
	waits  map[int]dmWait
}

type dmWait struct {
	at time.Time
	ch chan time.Time
}

// actorClock is one switch's view of switchTime.
type actorClock struct {
	t  *switchTime
	id int
}

func (a actorClock) Now() time.Time { return a.t.f.Now() }
func (a actorClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	a.t.mu.Lock()
	a.t.waits[a.id] = dmWait{a.t.f.Now().Add(d), ch}
	a.t.cond.Broadcast()
	a.t.mu.Unlock()
	return ch
}

// run runs every body as its own switch until each returns, moving the
// clock for them. Each time the clock moved, before any switch wakes,
// moved is called (with every switch waiting). A switch whose body has not
// returned when the clock reaches limit has its context cancelled.
func (t *switchTime) run(bodies []func(ctx context.Context, clk clock.Clock), limit time.Time, moved func()) (overran bool) {
	t.cond = sync.NewCond(&t.mu)
	t.waits = map[int]dmWait{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.active = len(bodies)
	for i, b := range bodies {
		go func() {
			b(ctx, actorClock{t, i})
			t.mu.Lock()
			delete(t.waits, i)
			t.active--
			t.cond.Broadcast()
			t.mu.Unlock()
		}()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		for t.active > 0 && len(t.waits) < t.active {
			t.cond.Wait()
		}
		if t.active == 0 {
			return overran
		}
		next := time.Time{}
		for _, w := range t.waits {
			if next.IsZero() || w.at.Before(next) {
				next = w.at
			}
		}
		if next.After(limit) && !overran {
			overran = true
			cancel() // every switch ends at its next look
		}
		if d := next.Sub(t.f.Now()); d > 0 {
			t.f.Advance(d)
			moved()
		}
		now := t.f.Now()
		for i, w := range t.waits {
			if !w.at.After(now) {
				w.ch <- now
				delete(t.waits, i)
			}
		}
	}
}

// flakyDestroys makes chosen destroy calls of the switches fail in
// transport: refused before they reach the API, or (lost) sent and
// answered, the answer never arriving.
type flakyDestroys struct {
	mu   sync.Mutex
	n    int
	fail map[int]bool // call number -> lost after it landed
	rt   http.RoundTripper
	// refused and lost count the calls failed each way.
	refused, lost int
}

func (f *flakyDestroys) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodDelete {
		return f.rt.RoundTrip(r)
	}
	f.mu.Lock()
	f.n++
	lost, fail := f.fail[f.n]
	if fail && lost {
		f.lost++
	} else if fail {
		f.refused++
	}
	f.mu.Unlock()
	if !fail {
		return f.rt.RoundTrip(r)
	}
	if lost {
		if res, err := f.rt.RoundTrip(r); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// dmFaults are the destroy faults armed once the controller is gone.
type dmFaults struct {
	n5xx, status, n429, nNoop int
	net                       map[int]bool // call number -> lost
}

func (f dmFaults) String() string {
	lost := 0
	for _, l := range f.net {
		if l {
			lost++
		}
	}
	return fmt.Sprintf("destroys then: %d×%d, %d×429, %d transport (%d lost after landing), %d no-op", f.n5xx, f.status, f.n429, len(f.net), lost, f.nNoop)
}

// failing is how many destroy calls the faults can make fail or do nothing.
func (f dmFaults) failing() int { return f.n5xx + f.n429 + len(f.net) + f.nNoop }

func drawDestroyFaults(rng *rand.Rand) dmFaults {
	count := func() int {
		switch r := rng.Float64(); {
		case r < 0.3:
			return 0
		case r < 0.9:
			return 1 + rng.IntN(6)
		default:
			return 7 + rng.IntN(24) // as many as the review's 20 429s and more
		}
	}
	f := dmFaults{n5xx: count(), status: []int{500, 502, 503, 504}[rng.IntN(4)], n429: count(), net: map[int]bool{}}
	if rng.Float64() < 0.3 {
		f.nNoop = 1 + rng.IntN(4)
	}
	// Transport failures at random calls among all the failing ones.
	if nNet := count(); nNet > 0 {
		span := f.n5xx + f.n429 + f.nNoop + nNet + 1
		for _, c := range rng.Perm(span)[:nNet] {
			f.net[c+1] = rng.Float64() < 0.4
		}
	}
	return f
}

const dmCIYAML = `
image: ` + image + `
test: |
  nvidia-smi -L; printf '{"ok": true}' > "$VASTRUN_RESULT"
gpu: {models: [RTX_4090, RTX_3090, RTX_3060], max_dph: 1.0}
budget: {max_spend: 2}
timeouts: {ready: 10m, job: 2m, teardown: 4m, heartbeat_ttl: TTL}
`

const dmCanaryYAML = `
image: ` + image + `
upload: [smoke.sh]
gpu: {max_dph: 1.0}
budget: {max_spend: 2}
timeouts: {ready: 10m, job: 10m, teardown: 4m, heartbeat_ttl: TTL}
canary:
  smoke: sh smoke.sh
  expect_fields: [checksum]
  ignore_fields: [device]
  cuda_check: nvidia-smi -L
`

const dmSmoke = `set -eu
printf '{"device": "%s", "checksum": %s}\n' "${VASTRUN_DEVICE:-cpu}" "$(seq 1 100 | awk '{ s += $1 } END { print s }')" > "${VASTRUN_RESULT:-/dev/stdout}"
`

const dmTrainYAML = `
image: ` + image + `
upload: [train.py]
gpu: {models: [RTX_4090, RTX_3090, RTX_3060], max_dph: 1.0}
budget: {max_spend: 5}
timeouts: {ready: 10m, teardown: 4m}
env: {TRAIN_STEPS: "40", TRAIN_STEP_DELAY: "0.01"}
train:
  command: python3 train.py
  checkpoint_uri: STORE
  cadence: 20
  keep: 2
  poll: 1s
  heartbeat_ttl: TTL
  max_attempts: 4
`

// dmSchedule is one deadman schedule.
type dmSchedule struct {
	flow   string // ci, canary or train
	ttl    time.Duration
	faults []sim.Fault          // the API and SSH faults the controller meets
	slow   func() time.Duration // slow-controller latency per call, or nil
	// The controller dies at call crashAt, or (crashOn set) afterOn calls
	// after its first call named crashOn ("arm", "create", ...); before
	// that call, or after it was answered.
	crashAt, afterOn int
	crashOn          string
	after            bool
	destroys         dmFaults // what destroys meet once it is gone
}

// randomDMSchedule draws a schedule from seed.
func randomDMSchedule(seed uint64) dmSchedule {
	rng := rand.New(rand.NewPCG(seed, seed*7877))
	sc := dmSchedule{flow: []string{"ci", "canary", "train"}[rng.IntN(3)]}
	sc.ttl = []time.Duration{time.Minute, 3 * time.Minute, 7 * time.Minute}[rng.IntN(3)]
	if sc.flow == "train" {
		sc.ttl = []time.Duration{2 * time.Minute, 5 * time.Minute}[rng.IntN(2)]
	}
	sc.faults = drawFaults(rng)
	// The controller dies at one of its calls: a quarter of the schedules
	// at one of its first 30 (most of them polls while the instance
	// boots), the others at the first arm or a call after it: for ci and
	// canary the next is the teardown's destroy (the test and the smoke
	// make none), training monitors with a few more until it ends.
	if rng.Float64() < 0.25 {
		sc.crashAt = 1 + rng.IntN(30)
	} else {
		sc.crashOn, sc.afterOn = "arm", rng.IntN(map[string]int{"ci": 2, "canary": 2, "train": 10}[sc.flow])
	}
	sc.after = rng.Float64() < 0.5
	sc.destroys = drawDestroyFaults(rng)
	sc.slow = slowFor(rng, 0.2, 1, 8)
	return sc
}

// runDeadMan runs one schedule; seed fixes the simulator.
func runDeadMan(t *testing.T, seed uint64, sc dmSchedule, mutate string, stats *dmStats) (violations []string, summary string) {
	flow, ttl, df := sc.flow, sc.ttl, sc.destroys
	clk := clock.NewFake(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	s, err := sim.New(sim.Config{Clock: clk, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer func() { srv.Close(); s.Close() }()
	faults := injectFaults(s, sc.faults)
	k := newKiller(sc.crashAt, sc.crashOn, sc.afterOn, sc.after)
	slow := sc.slow
	if slow != nil {
		faults = append(faults, "slow-controller")
	}
	when := "before"
	if k.after {
		when = "after"
	}
	at := fmt.Sprintf("call %d", k.crashAt)
	if k.on != "" {
		at = fmt.Sprintf("call %d after the first %s", k.afterOn, k.on)
	}
	summary = fmt.Sprintf("%s TTL %s, faults=%v, killed at %s (%s it), %s", flow, ttl, faults, at, when, df)
	bad := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	stats.mu.Lock()
	stats.flows[flow]++
	stats.mu.Unlock()

	root := t.TempDir()
	var bin, y string
	switch flow {
	case "ci":
		y = dmCIYAML
	case "canary":
		y = dmCanaryYAML
		os.WriteFile(filepath.Join(root, "smoke.sh"), []byte(dmSmoke), 0o644)
	case "train":
		var script []byte
		bin, script = trainInputs(t)
		os.WriteFile(filepath.Join(root, "train.py"), script, 0o644)
		y = strings.Replace(dmTrainYAML, "STORE", "file://"+filepath.Join(root, "store"), 1)
	}
	cfg, err := config.Parse([]byte(strings.Replace(y, "TTL", ttl.String(), 1)))
	if err != nil {
		t.Fatal(err)
	}
	sw := &dmSwitch{k: k, s: s, clk: clk, bin: bin, mutate: mutate, started: map[provider.InstanceID]*dmArmed{}}
	account := func(c clock.Clock) provider.Market {
		raw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: c})
		return retry.Wrap(raw, retry.Policy{Clock: c}) // as vastrun wraps it
	}
	market := account(dmClock{clk})
	if slow != nil {
		market = slowMarket{Market: market, clk: dmClock{clk}, delay: slow}
	}
	uiOut := &lockedBuf{}
	wall0, sim0 := time.Now(), clk.Now()
	deps := func(m provider.Market, c clock.Clock, stateRoot, evidence string) *lifecycle.Deps {
		return &lifecycle.Deps{
			Market: m, Clock: c, Log: slog.New(slog.DiscardHandler), Stream: &lockedBuf{},
			UI:     dmUI{uiOut, wall0, sim0, clk},
			Getenv: func(k string) string { return map[string]string{"VASTRUN_CONTAINER_ENGINE": "none"}[k] },
			CI:     cienv.Env{}, Redactor: redact.New(s.APIKey()),
			Approve: func(lifecycle.Plan) (bool, error) { return true, nil }, Annotations: &lockedBuf{}, Config: cfg,
			RepoDir: root, StateRoot: stateRoot, EvidenceDir: evidence, Simulated: true, APIURL: srv.URL,
			AgentBinary: bin, StorageEnv: map[string]string{}, SSHKeepAlive: sshKeepAlive, Switch: sw,
		}
	}
	e := lifecycle.New(deps(killMarket{Market: market, k: k}, deadClock{dmClock{clk}, k}, filepath.Join(root, "state"), filepath.Join(root, "ev")))
	done := make(chan struct{})
	var runErr error
	go func() {
		switch flow {
		case "ci":
			_, runErr = ci.Run(context.Background(), e)
		case "canary":
			_, runErr = canary.Run(context.Background(), e, false)
		case "train":
			_, runErr = trainflow.Run(context.Background(), e)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-k.died:
	}
	killed := k.kill("the run returned")
	stats.mu.Lock()
	if killed {
		stats.killed++
		if strings.HasPrefix(k.at, "arm ") {
			stats.killedArming++
		}
	} else {
		stats.exited++
	}
	stats.mu.Unlock()
	if killed {
		summary += fmt.Sprintf("; died at %s", k.at)
	} else {
		summary += fmt.Sprintf("; the run returned (%v) after %d calls", runErr, k.n)
	}
	summary += fmt.Sprintf(" (first arm: call %d)", k.firstArm)

	// The controller is gone: what is live now is the switch's, or down's.
	wallDeath := time.Now()
	death := clk.Now()
	atDeath := s.Snapshot()
	s.Inject(sim.Fault{Kind: sim.FaultClear})
	type covered struct {
		in       sim.InstanceState
		armed    *dmArmed
		spec     agent.DeadManSpec
		rate     float64
		costAt   float64
		log      lockedBuf
		err      error
		calls    []time.Time
		goneAt   time.Time
		stopped  bool
		ended    bool // its instance was destroyed, ending its container
		answered map[string]int
		ctx      context.Context
		stop     context.CancelFunc
	}
	var switches []*covered
	var toDown []sim.InstanceState
	sw.mu.Lock()
	started := sw.started
	sw.mu.Unlock()
	for _, in := range atDeath.Live {
		ws := filepath.Join(in.Sandbox, "workspace")
		specB, specErr := os.ReadFile(filepath.Join(ws, agent.DeadManFile))
		a := started[provider.InstanceID(in.ID)]
		switch {
		case specErr == nil && a == nil:
			bad("instance %d is armed (%s on it) but no switch runs there: left to down", in.ID, agent.DeadManFile)
			toDown = append(toDown, in)
		case a != nil && in.ActualStatus == "running":
			c := &covered{in: in, armed: a, costAt: in.GPUCost + in.DiskCost, answered: map[string]int{}}
			c.ctx, c.stop = context.WithCancel(context.Background())
			if err := json.Unmarshal(specB, &c.spec); err != nil {
				bad("instance %d: %s: %v", in.ID, agent.DeadManFile, err)
			}
			if cur, err := account(dmClock{clk}).ShowInstance(context.Background(), provider.InstanceID(in.ID)); err == nil {
				c.rate = cur.DPHTotal
			} else {
				bad("show instance %d at the controller's end: %v", in.ID, err)
			}
			switches = append(switches, c)
		case a != nil:
			stats.mu.Lock()
			stats.left["stopped with its switch"]++
			stats.mu.Unlock()
			toDown = append(toDown, in)
		default:
			stats.mu.Lock()
			stats.left["never armed"]++
			stats.mu.Unlock()
			toDown = append(toDown, in)
		}
	}

	// The API fails destroys; the switches take over.
	if df.n429 > 0 {
		s.Inject(sim.Fault{Kind: sim.FaultRateLimit, Endpoint: "destroy", Count: df.n429})
	}
	if df.n5xx > 0 {
		s.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "destroy", Count: df.n5xx, Status: df.status})
	}
	if df.nNoop > 0 {
		s.Inject(sim.Fault{Kind: sim.FaultDestroyNoop, Count: df.nNoop})
	}
	flaky := &flakyDestroys{fail: df.net, rt: http.DefaultTransport}
	hb, _ := json.Marshal(agent.NewHeartbeatRequest(1))
	var bodies []func(context.Context, clock.Clock)
	for _, c := range switches {
		if a, err := agent.Beat(c.armed.layout, hb, death); !a.OK || err != nil {
			bad("the controller's last beat on instance %d: %v %v", c.in.ID, a.Errors, err)
		}
		if mutate == "early" {
			half := c.spec
			half.TTL /= 2
			b, _ := json.Marshal(half)
			os.WriteFile(c.armed.layout.Abs(agent.DeadManFile), b, 0o644)
		}
		key := c.in.APIKey
		if mutate == "account-key" {
			key = s.APIKey()
		}
		var logw io.Writer = &c.log
		if mutate == "quiet" {
			logw = io.Discard
		}
		bodies = append(bodies, func(all context.Context, clk clock.Clock) {
			defer c.armed.lock.Close() // the switch's end releases its lock
			ctx, cancel := context.WithCancel(c.ctx)
			defer cancel()
			defer context.AfterFunc(all, cancel)()
			o := agent.DeadManOptions{Layout: c.armed.layout, Clock: clk, Log: logw, Poll: dmPoll,
				Destroy: func(ctx context.Context, apiURL string) (bool, error) {
					// What `vastrun agent deadman` sends: one destroy with
					// the instance's own key (cli's selfDestroy).
					vc, err := vast.New(vast.Options{BaseURL: apiURL, APIKey: key, HTTPClient: &http.Client{Transport: flaky}, Clock: clk})
					if err != nil {
						return false, err
					}
					c.calls = append(c.calls, clk.Now())
					gone, err := vc.DestroyInstanceGone(ctx, provider.InstanceID(c.in.ID))
					var ae *provider.APIError
					switch {
					case errors.As(err, &ae) && ae.Status >= 500:
						c.answered["5xx"]++
					case errors.As(err, &ae):
						c.answered[fmt.Sprint(ae.Status)]++
					case err != nil:
						c.answered["transport"]++
					case gone:
						c.answered["gone"]++
					default:
						c.answered["accepted"]++
					}
					if c.goneAt.IsZero() && dmDestroyed(s, c.in.ID) {
						// Destroyed: the container ends, and the switch
						// with it (the instance's key goes too, so the API
						// would never tell this switch "no such instance").
						c.goneAt, c.ended = clk.Now(), true
						cancel()
					}
					if err != nil && mutate == "give-up" {
						cancel()
					}
					return gone, err
				}}
			if mutate == "slow" {
				o.Backoff.Initial, o.Backoff.Max = time.Hour, time.Hour
			}
			c.err = agent.RunDeadMan(ctx, o)
		})
	}
	limit := death.Add(24 * time.Hour)
	st := &switchTime{f: clk}
	overran := st.run(bodies, limit, func() {
		// A switch dies with its container: one stopped (preempted) while
		// the switch waits is left to down.
		for _, in := range s.Snapshot().Live {
			for _, c := range switches {
				if in.ID == c.in.ID && in.ActualStatus != "running" && !c.stopped {
					c.stopped = true
					c.stop()
				}
			}
		}
	})
	if overran {
		bad("a switch was still destroying 24 h after the controller's end")
	}
	wallSwitched := time.Now()

	// Down for what no switch covers, once the API behaves again.
	for _, c := range switches {
		if c.stopped {
			toDown = append(toDown, c.in)
		}
	}
	if len(toDown) > 0 && mutate != "no-down" {
		s.Inject(sim.Fault{Kind: sim.FaultClear})
		stateCopy := filepath.Join(root, "state-after")
		if out, err := exec.Command("cp", "-a", filepath.Join(root, "state"), stateCopy).CombinedOutput(); err != nil {
			bad("copy the state for down: %v %s", err, out)
		} else if dir, err := lifecycle.CurrentRunDir(stateCopy); err != nil {
			bad("%d instances left to down, but no run to down: %v", len(toDown), err)
		} else {
			e2 := lifecycle.New(deps(account(dmClock{clk}), dmClock{clk}, stateCopy, filepath.Join(root, "ev-down")))
			e2.Switch = &dmSwitch{k: newKiller(0, "", 0, false), s: s, clk: clk, started: map[provider.InstanceID]*dmArmed{}}
			if err := e2.Open(dir); err != nil {
				bad("open the run for down: %v", err)
			} else {
				if _, err := e2.Down(context.Background()); err != nil {
					bad("down: %v", err)
				}
				e2.Close()
			}
		}
	}

	summary += fmt.Sprintf("; %d live at the end of the controller: %d to switches, %d to down", len(atDeath.Live), len(switches), len(toDown))
	if *deadmanDebug {
		summary += fmt.Sprintf(" [wall: controller %.2fs, switches %.2fs, down %.2fs]", wallDeath.Sub(wall0).Seconds(), wallSwitched.Sub(wallDeath).Seconds(), time.Since(wallSwitched).Seconds())
	}

	// The checks.
	end := s.Snapshot()
	if len(end.Live) != 0 {
		var ids []string
		for _, in := range end.Live {
			ids = append(ids, fmt.Sprintf("%d (%s)", in.ID, in.ActualStatus))
		}
		bad("%d live instances at the end: %s", len(end.Live), strings.Join(ids, ", "))
	}
	final := map[int64]sim.InstanceState{}
	for _, in := range end.Gone {
		final[in.ID] = in
	}
	for _, in := range toDown {
		if f, ok := final[in.ID]; ok && f.DestroyedBy != "account_key" {
			bad("instance %d, left to down, was destroyed by %q, not down's account key", in.ID, f.DestroyedBy)
		}
	}
	stats.mu.Lock()
	for _, c := range switches {
		if c.stopped {
			stats.left["stopped while its switch waited"]++
		}
	}
	stats.mu.Unlock()
	for _, c := range switches {
		if c.stopped {
			continue
		}
		id := c.in.ID
		f, gone := final[id]
		stats.mu.Lock()
		stats.switched++
		if len(c.calls) > 0 {
			stats.fired++
		}
		stats.attempts += len(c.calls)
		stats.maxTries = max(stats.maxTries, len(c.calls))
		for st, n := range c.answered {
			switch st {
			case "429":
				stats.failed429 += n
			case "transport":
				stats.failedNet += n
			case "5xx":
				stats.failed503 += n
			case "accepted", "gone":
			default:
				stats.failedOther += n
			}
		}
		stats.mu.Unlock()
		if !gone {
			bad("instance %d, armed and running at the controller's end, is still live (its switch: %v, %d destroys)", id, c.err, len(c.calls))
			continue
		}
		if f.DestroyedBy != "container_api_key" {
			bad("instance %d was destroyed by %q, not by its own key", id, f.DestroyedBy)
		}
		if !c.ended && c.err != nil {
			bad("instance %d: its switch ended with %v before the instance was gone", id, c.err)
		}
		// When it must fire: the TTL after the last beat (the controller's
		// end), or the run's bound from arming if that comes first.
		fireAt := death.Add(time.Duration(c.spec.TTL))
		if b := time.Duration(c.spec.Bound); b > 0 {
			if at := c.spec.ArmedAt.Add(b); at.Before(fireAt) {
				fireAt = later(at, death)
				stats.mu.Lock()
				stats.boundFired++
				stats.mu.Unlock()
			}
		}
		if len(c.calls) == 0 {
			bad("instance %d was destroyed by its own key, but not by its switch", id)
			continue
		}
		if first := c.calls[0]; first.Before(fireAt) || first.After(fireAt.Add(dmPoll)) {
			bad("instance %d: its switch fired %s after the controller's end, want %s (TTL %s, bound %s from %s)", id,
				first.Sub(death), fireAt.Sub(death), time.Duration(c.spec.TTL), time.Duration(c.spec.Bound), c.spec.ArmedAt.Format(time.RFC3339))
		}
		waits := df.failing() + 1 // then the destroy that lands, and one more to hear it is gone
		deadline := fireAt.Add(dmPoll + dmBackoffBound(waits))
		if !c.goneAt.IsZero() && c.goneAt.After(deadline) {
			bad("instance %d: gone %s after the controller's end, past the TTL and the backoff of %d waits (%s)", id, c.goneAt.Sub(death), waits, deadline.Sub(death))
		}
		if billed := f.GPUCost + f.DiskCost - c.costAt; billed > c.rate*deadline.Sub(death).Hours()+1e-9 {
			bad("instance %d billed $%.6f after the controller's end, more than $%.4f/h for %s", id, billed, c.rate, deadline.Sub(death))
		}
		if n := strings.Count(c.log.String(), "destroy attempt"); n != len(c.calls) {
			bad("instance %d: %d destroys sent, %d in the switch's log", id, len(c.calls), n)
		}
	}
	for _, c := range switches {
		stats.mu.Lock()
		stats.accepted += c.answered["accepted"]
		stats.mu.Unlock()
	}
	stats.mu.Lock()
	stats.lost += flaky.lost
	stats.mu.Unlock()
	for label, n := range end.MaxLivePerLabel {
		if n > 1 {
			bad("label %s had %d live contracts at once", label, n)
		}
	}
	for _, a := range started {
		a.lock.Close() // the switches that did not run hold their locks till now
	}
	if len(violations) > 0 && *deadmanDebug {
		for _, c := range switches {
			fmt.Printf("  switch of instance %d:\n%s", c.in.ID, c.log.String())
		}
		fmt.Printf("  controller:\n%s", uiOut.String())
	}
	return violations, summary
}

// dmUI is the controller's messages, each with the wall and simulated
// time since the schedule began (for -deadman-debug).
type dmUI struct {
	w           io.Writer
	wall0, sim0 time.Time
	clk         clock.Clock
}

func (u dmUI) Infof(format string, args ...any) {
	fmt.Fprintf(u.w, "  [wall %5.2fs, sim %s] vastrun: %s\n", time.Since(u.wall0).Seconds(), u.clk.Now().Sub(u.sim0), fmt.Sprintf(format, args...))
}

// dmDestroyed says whether instance id is destroyed.
func dmDestroyed(s *sim.Server, id int64) bool {
	for _, in := range s.Snapshot().Gone {
		if in.ID == id {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
