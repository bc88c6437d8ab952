package chaos

// The team family: two or three controllers race to drive one run whose
// state is on a shared backend (the real state and team packages over the
// in-process state backend), under a deterministic scheduler that
// interleaves them one backend or marketplace call at a time. Faults:
// a controller SIGKILLed mid-operation (it stops dead, lease unreleased),
// a controller's S3 traffic dropped for a while (a partition), and clock
// skew (each controller's clock has its own offset and a drift of up to
// ±5%). After every schedule the partitions heal, a last controller
// finishes the run, and the checks are:
//
//   - never two controllers driving at once: every mutating marketplace
//     call is made by the holder of the lease that is current and
//     unexpired on the server's clock at that instant;
//   - no duplicate rental: the run rents exactly one instance;
//   - no leak: zero live instances at the end;
//   - the journal has no entry of a fenced-off writer after a takeover.
//
//	go test ./test/chaos -run TestTeam -team-seeds 1000 -v

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

var teamSeeds = seedCount("team-seeds", envTeamSeeds, 200, "randomized racing-controller schedules to run (team state)")

const (
	teamTTL    = 3 * time.Second
	teamMargin = 750 * time.Millisecond
	teamRun    = "mxteamrun001"
	maxSteps   = 20000
)

// killed is the panic that stops a controller dead (SIGKILL).
type killed struct{}

// sched runs one controller at a time; each yields at every call.
type sched struct {
	rng     *rand.Rand
	server  time.Time // the server's clock
	mu      sync.Mutex
	ready   chan int
	exited  chan int
	grant   map[int]chan bool // true: go on; false: die
	running map[int]bool
	steps   int
	// faults, by controller
	cut  map[int]bool
	kill map[int]int // die at this step count
}

func (s *sched) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.server
}

// yield is called by controller id before each call; it returns whether
// the controller's traffic to the backend is cut.
func (s *sched) yield(id int) bool {
	s.mu.Lock()
	g := s.grant[id]
	s.mu.Unlock()
	s.ready <- id
	if !<-g {
		panic(killed{})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut[id]
}

// skewed is a controller's own clock: an offset and a drift off the
// server's. Only durations on it matter to a lease.
type skewed struct {
	s      *sched
	offset time.Duration
	rate   float64
	start  time.Time
}

func (c *skewed) Now() time.Time {
	d := c.s.now().Sub(c.start)
	return c.start.Add(c.offset + time.Duration(float64(d)*c.rate))
}

func (c *skewed) After(d time.Duration) <-chan time.Time { panic("not used: renewals are explicit") }

// viewBackend is one controller's view of the shared backend.
type viewBackend struct {
	s     *sched
	id    int
	inner *teamstate.Memory
}

func (v *viewBackend) gate(op, key string) error {
	if v.s.yield(v.id) {
		return fmt.Errorf("%s %s: %w: traffic dropped", op, key, teamstate.ErrUnavailable)
	}
	return nil
}

func (v *viewBackend) Get(ctx context.Context, key string) (teamstate.Object, time.Time, error) {
	if err := v.gate("get", key); err != nil {
		return teamstate.Object{}, time.Time{}, err
	}
	return v.inner.Get(ctx, key)
}

func (v *viewBackend) PutIfAbsent(ctx context.Context, key string, data []byte) (string, error) {
	if err := v.gate("create", key); err != nil {
		return "", err
	}
	return v.inner.PutIfAbsent(ctx, key, data)
}

func (v *viewBackend) PutIfMatch(ctx context.Context, key string, data []byte, etag string) (string, error) {
	if err := v.gate("replace", key); err != nil {
		return "", err
	}
	return v.inner.PutIfMatch(ctx, key, data, etag)
}

func (v *viewBackend) List(ctx context.Context, prefix string) ([]string, error) {
	if err := v.gate("list", prefix); err != nil {
		return nil, err
	}
	return v.inner.List(ctx, prefix)
}

func (v *viewBackend) URI() string { return v.inner.URI() }

// market is the marketplace: it checks, at every mutating call, that the
// caller holds the current, unexpired lease on the server.
type market struct {
	provider.Market // unused methods
	s               *sched
	backend         *teamstate.Memory
	mu              sync.Mutex
	next            provider.InstanceID
	live            map[provider.InstanceID]string // id -> label
	rented          int
	violations      []string
}

func (m *market) judge(op string, caller teamstate.Holder) {
	o, now, err := m.backend.Get(context.Background(), teamstate.LeaseKey(teamRun))
	if err != nil {
		m.violations = append(m.violations, fmt.Sprintf("%s by %s with no lease object", op, caller.Host))
		return
	}
	var rec teamstate.LeaseRecord
	json.Unmarshal(o.Data, &rec)
	if rec.Holder.ID != caller.ID || rec.Released || now.After(o.LastModified.Add(rec.TTL())) {
		m.violations = append(m.violations, fmt.Sprintf("%s by %s while the lease is %s's (generation %d, released %v, expired %v): two controllers drive the run",
			op, caller.Host, rec.Holder.Host, rec.Generation, rec.Released, now.After(o.LastModified.Add(rec.TTL()))))
	}
}

type callerKey struct{}

func (m *market) CreateInstance(ctx context.Context, req provider.CreateRequest) (provider.CreateResult, error) {
	h := ctx.Value(callerKey{}).(*ctrl)
	m.s.yield(h.id)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.judge("rent", h.holder)
	m.next++
	m.rented++
	m.live[m.next] = req.Label
	return provider.CreateResult{InstanceID: m.next}, nil
}

func (m *market) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	h := ctx.Value(callerKey{}).(*ctrl)
	m.s.yield(h.id)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.judge("destroy", h.holder)
	delete(m.live, id)
	return nil
}

func (m *market) ListInstances(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	h := ctx.Value(callerKey{}).(*ctrl)
	m.s.yield(h.id)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []provider.Instance
	for id, l := range m.live {
		for _, want := range opts.Labels {
			if l == want {
				out = append(out, provider.Instance{ID: id, Label: l})
			}
		}
	}
	return out, nil
}

// ctrl is one controller process.
type ctrl struct {
	id     int
	holder teamstate.Holder
	b      teamstate.Backend
	clk    *skewed
}

// runState is what the journal says.
type runState struct {
	rentIntent, rented, destroyIntent, destroyed, finished bool
	instance                                               provider.InstanceID
	work                                                   int
}

func replay(es []teamstate.Entry) runState {
	var st runState
	for _, e := range es {
		switch e.Type + "/" + e.Step {
		case "intent/rent":
			st.rentIntent = true
		case "done/rent":
			st.rented = true
			var d struct{ ID provider.InstanceID }
			json.Unmarshal(e.Data, &d)
			st.instance = d.ID
		case "event/work":
			st.work++
		case "intent/destroy":
			st.destroyIntent = true
		case "done/destroy":
			st.destroyed = true
		case "event/outcome":
			st.finished = true
		}
	}
	return st
}

// drive is one controller's life: acquire (waiting while another holds
// the lease), then continue the run from the journal to its end. It
// returns when the run is finished, or when it lost or fenced its lease.
func (c *ctrl) drive(m *market, workSteps int) {
	ctx := context.WithValue(context.Background(), callerKey{}, c)
	lo := teamstate.LeaseOptions{TTL: teamTTL, Margin: teamMargin, Clock: c.clk}
	// The journal is read before the lease is taken (that needs no lease),
	// and only its tail after.
	var seen []teamstate.Entry
	for {
		es, err := teamstate.ReadRunLogAfter(ctx, c.b, teamRun, seen)
		if err == nil {
			seen = es
			break
		}
	}
	var l *teamstate.Lease
	for {
		var err error
		l, err = teamstate.Acquire(ctx, c.b, teamRun, c.holder, lo)
		if err == nil {
			break
		}
		if !errors.Is(err, teamstate.ErrHeld) && !errors.Is(err, teamstate.ErrUnavailable) {
			panic(fmt.Sprintf("acquire: %v", err))
		}
		c.b.(*viewBackend).s.yield(c.id) // wait a while
		if es, err := teamstate.ReadRunLogAfter(ctx, c.b, teamRun, seen); err == nil {
			if seen = es; replay(es).finished {
				return
			}
		}
	}
	log, err := teamstate.OpenRunLog(ctx, c.b, l, c.clk.Now)
	if err != nil {
		return // lost, fenced, or cut off before the takeover entry: exit
	}
	fm := (&team.FencedMarket{Market: m, Lease: func() *teamstate.Lease { return l }})
	es, err := teamstate.ReadRunLogAfter(ctx, c.b, teamRun, seen)
	if err != nil {
		return
	}
	st := replay(es)
	lastRenew := c.clk.Now()
	// appendOK retries a write whose outcome is unknown until it is
	// known or the lease is gone.
	appendOK := func(typ, step string, data any) bool {
		for {
			if c.clk.Now().Sub(lastRenew) > teamTTL/3 {
				if err := l.Renew(ctx); err == nil {
					lastRenew = c.clk.Now()
				}
			}
			_, err := log.Append(ctx, typ, step, data)
			if err == nil {
				return true
			}
			if !errors.Is(err, teamstate.ErrUnavailable) {
				return false
			}
		}
	}
	if st.finished {
		l.Release(ctx)
		return
	}
	if st.rentIntent && !st.rented {
		// The rent's outcome is unknown: the marketplace, by label, says.
		found, err := m.ListInstances(ctx, provider.ListOptions{Labels: []string{teamRun}})
		if err != nil {
			return
		}
		if len(found) > 0 {
			st.rented, st.instance = true, found[0].ID
			if !appendOK("done", "rent", map[string]any{"ID": found[0].ID, "adopted": true}) {
				return
			}
		}
	}
	if !st.rented {
		if !appendOK("intent", "rent", nil) {
			return
		}
		res, err := fm.CreateInstance(ctx, provider.CreateRequest{Label: teamRun})
		if err != nil {
			return // fenced before renting
		}
		st.rented, st.instance = true, res.InstanceID
		if !appendOK("done", "rent", map[string]any{"ID": res.InstanceID}) {
			return
		}
	}
	for ; st.work < workSteps; st.work++ {
		if !appendOK("event", "work", nil) {
			return
		}
	}
	if !st.destroyed {
		if !appendOK("intent", "destroy", nil) {
			return
		}
		if err := fm.DestroyInstance(ctx, st.instance); err != nil {
			return
		}
		if !appendOK("done", "destroy", nil) {
			return
		}
	}
	if appendOK("event", "outcome", nil) {
		l.Release(ctx)
	}
}

// teamSchedule runs one seed; it returns the violations found.
type teamStats struct{ racers, controllers, kills, cuts, generations, steps int }

func (t teamStats) String() string {
	return fmt.Sprintf("racers %d, controllers %d, kills %d, partitions %d, generations %d, steps %d",
		t.racers, t.controllers, t.kills, t.cuts, t.generations, t.steps)
}

func teamSchedule(seed uint64) (violations []string, stats teamStats) {
	rng := rand.New(rand.NewPCG(seed, seed^0x7ea3))
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := &sched{rng: rng, server: start, ready: make(chan int), exited: make(chan int), grant: map[int]chan bool{},
		running: map[int]bool{}, cut: map[int]bool{}, kill: map[int]int{}}
	mem := teamstate.NewMemory(clockFunc(s.now))
	m := &market{s: s, backend: mem, live: map[provider.InstanceID]string{}}
	workSteps := 10 + rng.IntN(50)
	nextID := 0
	spawn := func(faulty bool) {
		id := nextID
		nextID++
		c := &ctrl{id: id, holder: teamstate.Holder{Host: fmt.Sprintf("c%d", id), PID: 100 + id, ID: teamstate.NewID()},
			clk: &skewed{s: s, offset: time.Duration(rng.IntN(7200)-3600) * time.Second, rate: 0.95 + rng.Float64()*0.1, start: start}}
		c.b = &viewBackend{s: s, id: id, inner: mem}
		s.mu.Lock()
		s.grant[id] = make(chan bool)
		s.mu.Unlock()
		s.running[id] = true
		if faulty && rng.IntN(2) == 0 {
			s.kill[id] = s.steps + 1 + rng.IntN(200)
		}
		go func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(killed); !ok {
						violations = append(violations, fmt.Sprintf("controller c%d panicked: %v", id, r))
					}
				}
				s.exited <- id
			}()
			c.drive(m, workSteps)
		}()
		// Wait for its first yield (or its exit).
		select {
		case <-s.ready:
		case <-s.exited:
			delete(s.running, id)
		}
	}
	racers := 2 + rng.IntN(2)
	for range racers {
		spawn(true)
	}
	kills, cuts, spawned := 0, 0, racers
	finished := func() bool {
		es, err := teamstate.ReadRunLog(context.Background(), mem, teamRun)
		return err == nil && replay(es).finished
	}
	chaosOver := false
	for s.steps = 0; s.steps < maxSteps; s.steps++ {
		if len(s.running) == 0 {
			if finished() {
				break
			}
			// Everyone is dead or fenced: a new controller resumes (a CI
			// retry, a laptop, a cron job); the last ones are fault-free.
			spawn(!chaosOver)
			spawned++
			continue
		}
		if !chaosOver && s.steps > 1500 {
			chaosOver = true
			for id := range s.cut {
				s.cut[id] = false
			}
		}
		// Pick a runnable controller.
		ids := make([]int, 0, len(s.running))
		for id := 0; id < nextID; id++ {
			if s.running[id] {
				ids = append(ids, id)
			}
		}
		id := ids[rng.IntN(len(ids))]
		s.mu.Lock()
		s.server = s.server.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
		if !chaosOver && rng.IntN(50) == 0 {
			c := ids[rng.IntN(len(ids))]
			s.cut[c] = !s.cut[c]
			if s.cut[c] {
				cuts++
			}
		}
		s.mu.Unlock()
		die := false
		if at, ok := s.kill[id]; ok && s.steps >= at && !chaosOver {
			die = true
			kills++
		}
		s.grant[id] <- !die
		select {
		case <-s.ready:
		case gone := <-s.exited:
			delete(s.running, gone)
		}
	}
	if !finished() {
		violations = append(violations, fmt.Sprintf("the run did not finish within %d steps", maxSteps))
	}
	// Let any controller still waiting die, so no goroutine outlives us.
	for id := range s.running {
		s.grant[id] <- false
		for {
			select {
			case <-s.ready:
				s.grant[id] <- false
				continue
			case <-s.exited:
			}
			break
		}
	}
	violations = append(violations, m.violations...)
	if m.rented != 1 {
		violations = append(violations, fmt.Sprintf("%d rentals for one run, want exactly 1", m.rented))
	}
	if len(m.live) != 0 {
		violations = append(violations, fmt.Sprintf("%d instances leaked", len(m.live)))
	}
	// No entry of a fenced-off writer after a takeover, in the raw log.
	keys, _ := mem.List(context.Background(), "runs/"+teamRun+"/journal/")
	var maxGen int64
	for _, k := range keys {
		o, _, _ := mem.Get(context.Background(), k)
		var e teamstate.Entry
		json.Unmarshal(o.Data, &e)
		if e.Generation < maxGen {
			violations = append(violations, fmt.Sprintf("journal entry %d of generation %d after generation %d", e.Seq, e.Generation, maxGen))
		}
		maxGen = max(maxGen, e.Generation)
	}
	return violations, teamStats{racers, spawned, kills, cuts, int(maxGen), s.steps}
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time                         { return f() }
func (f clockFunc) After(d time.Duration) <-chan time.Time { panic("not used") }

func TestTeamRacingControllers(t *testing.T) {
	checkEnv(t)
	bad, takeovers, kills, cuts := 0, 0, 0, 0
	for i := 0; i < *teamSeeds; i++ {
		seed := *firstSeed + uint64(i)
		v, st := teamSchedule(seed)
		kills += st.kills
		cuts += st.cuts
		if st.generations > 1 {
			takeovers++
		}
		if len(v) > 0 {
			bad++
			t.Errorf("seed %d (%s): %v", seed, st, v)
		}
	}
	t.Logf("chaos team: %d schedules, %d with a takeover, %d SIGKILLs, %d partitions, %d with violations", *teamSeeds, takeovers, kills, cuts, bad)
	report(t, familyReport{Family: "team", Schedules: *teamSeeds, FirstSeed: *firstSeed, Violations: bad})
	if *teamSeeds >= 50 && (takeovers == 0 || kills == 0 || cuts == 0) {
		t.Errorf("the faults never bit (takeovers %d, kills %d, partitions %d)", takeovers, kills, cuts)
	}
}

// TestTeamJudge proves the checks can fail: a call by a controller that
// does not hold the current lease, or holds an expired one, is flagged.
func TestTeamJudge(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	srv := now
	mem := teamstate.NewMemory(clockFunc(func() time.Time { return srv }))
	m := &market{backend: mem, live: map[provider.InstanceID]string{}}
	a := teamstate.Holder{Host: "a", ID: teamstate.NewID()}
	b := teamstate.Holder{Host: "b", ID: teamstate.NewID()}
	m.judge("rent", a)
	if len(m.violations) != 1 {
		t.Fatalf("a call with no lease object: %v", m.violations)
	}
	if _, err := teamstate.Acquire(context.Background(), mem, teamRun, a, teamstate.LeaseOptions{TTL: teamTTL, Clock: clockFunc(func() time.Time { return srv })}); err != nil {
		t.Fatal(err)
	}
	m.violations = nil
	m.judge("rent", a)
	if len(m.violations) != 0 {
		t.Fatalf("the holder's call was flagged: %v", m.violations)
	}
	m.judge("destroy", b)
	srv = srv.Add(teamTTL + time.Millisecond)
	m.judge("destroy", a)
	if len(m.violations) != 2 {
		t.Fatalf("a non-holder's call and an expired holder's call: %d flagged (%v), want 2", len(m.violations), m.violations)
	}
}
