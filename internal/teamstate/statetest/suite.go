// Package statetest is the conformance suite every teamstate.Backend passes,
// and the lease and journal suite run on top of each backend. Real servers
// run it as well as the in-process fake: the fake only proves the code,
// the servers prove the wire.
//
// Lease expiry needs the server's clock to move, so the expiry cases use a
// short TTL and wait, on an injected clock, until the server itself says
// the lease is gone; nothing asserts how long that took.
package statetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Run runs the backend and lease suites on backends made by open; each
// call must return an empty backend.
func Run(t *testing.T, open func(t *testing.T) teamstate.Backend) {
	t.Run("Backend", func(t *testing.T) { RunBackend(t, open) })
	t.Run("Lease", func(t *testing.T) { RunLease(t, open) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// RunBackend checks the Backend contract.
func RunBackend(t *testing.T, open func(t *testing.T) teamstate.Backend) {
	t.Run("GetMissing", func(t *testing.T) {
		b := open(t)
		if _, _, err := b.Get(ctx(t), "runs/x/lease.json"); !errors.Is(err, teamstate.ErrNotExist) {
			t.Fatalf("Get of a missing key: %v, want ErrNotExist", err)
		}
	})
	t.Run("CreateOnce", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		etag, err := b.PutIfAbsent(c, "k/a.json", []byte(`{"n":1}`))
		if err != nil || etag == "" {
			t.Fatalf("create: etag %q, %v", etag, err)
		}
		if _, err := b.PutIfAbsent(c, "k/a.json", []byte(`{"n":2}`)); !errors.Is(err, teamstate.ErrPrecondition) {
			t.Fatalf("second create: %v, want ErrPrecondition", err)
		}
		o, now, err := b.Get(c, "k/a.json")
		if err != nil {
			t.Fatal(err)
		}
		if string(o.Data) != `{"n":1}` || o.ETag != etag {
			t.Fatalf("got %q etag %q, want the first write with etag %q", o.Data, o.ETag, etag)
		}
		if now.IsZero() || o.LastModified.IsZero() {
			t.Fatalf("server time %v, last modified %v: both must be known", now, o.LastModified)
		}
		if o.LastModified.After(now.Add(2 * time.Second)) {
			t.Fatalf("last modified %v is after the server's now %v", o.LastModified, now)
		}
	})
	t.Run("CompareAndSwap", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		e1, err := b.PutIfAbsent(c, "k/b.json", []byte(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PutIfMatch(c, "k/b.json", []byte(`{"n":9}`), "0123456789abcdef0123456789abcdef"); !errors.Is(err, teamstate.ErrPrecondition) {
			t.Fatalf("replace with a wrong ETag: %v, want ErrPrecondition", err)
		}
		if _, err := b.PutIfMatch(c, "k/missing.json", []byte(`{}`), e1); !errors.Is(err, teamstate.ErrPrecondition) {
			t.Fatalf("replace of a missing key: %v, want ErrPrecondition", err)
		}
		e2, err := b.PutIfMatch(c, "k/b.json", []byte(`{"n":2}`), e1)
		if err != nil || e2 == e1 {
			t.Fatalf("replace with the right ETag: %q (was %q), %v", e2, e1, err)
		}
		if _, err := b.PutIfMatch(c, "k/b.json", []byte(`{"n":3}`), e1); !errors.Is(err, teamstate.ErrPrecondition) {
			t.Fatalf("replace with a stale ETag: %v, want ErrPrecondition", err)
		}
		o, _, err := b.Get(c, "k/b.json")
		if err != nil || string(o.Data) != `{"n":2}` || o.ETag != e2 {
			t.Fatalf("got %q %q %v, want {\"n\":2} %q", o.Data, o.ETag, err, e2)
		}
	})
	t.Run("RacingCreates", func(t *testing.T) {
		b := open(t)
		wins := race(t, 8, func(i int) error {
			_, err := b.PutIfAbsent(ctx(t), "k/race.json", fmt.Appendf(nil, `{"i":%d}`, i))
			return err
		})
		if wins != 1 {
			t.Fatalf("%d of 8 racing creates succeeded, want exactly 1", wins)
		}
	})
	t.Run("RacingSwaps", func(t *testing.T) {
		b := open(t)
		etag, err := b.PutIfAbsent(ctx(t), "k/swap.json", []byte(`{"i":-1}`))
		if err != nil {
			t.Fatal(err)
		}
		wins := race(t, 8, func(i int) error {
			_, err := b.PutIfMatch(ctx(t), "k/swap.json", fmt.Appendf(nil, `{"i":%d}`, i), etag)
			return err
		})
		if wins != 1 {
			t.Fatalf("%d of 8 racing swaps on one ETag succeeded, want exactly 1", wins)
		}
	})
	t.Run("List", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		for _, k := range []string{"runs/b/x.json", "runs/a/y.json", "runs/a/journal/0000000001.json", "budget/2026-12.json"} {
			if _, err := b.PutIfAbsent(c, k, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := b.List(c, "runs/")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"runs/a/journal/0000000001.json", "runs/a/y.json", "runs/b/x.json"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("List(runs/) = %v, want %v", got, want)
		}
	})
	t.Run("BadKeys", func(t *testing.T) {
		b := open(t)
		for _, k := range []string{"", "/abs", "a/../b", "a//b", "dir/"} {
			if _, err := b.PutIfAbsent(ctx(t), k, []byte(`{}`)); err == nil {
				t.Errorf("create of key %q succeeded", k)
			}
		}
	})
}

// race runs n calls at once and counts successes; every failure must be
// a refused condition, not an error of another kind.
func race(t *testing.T, n int, f func(i int) error) int {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f(i)
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, teamstate.ErrPrecondition):
			t.Errorf("racer failed with %v, want success or ErrPrecondition", err)
		}
	}
	return wins
}

func holder(name string) teamstate.Holder {
	return teamstate.Holder{Host: name, PID: 1, ID: teamstate.NewID()}
}

// waitExpired waits until the server says the run's lease is not live.
func waitExpired(t *testing.T, b teamstate.Backend, run string) {
	t.Helper()
	c := ctx(t)
	for {
		_, live, _, err := teamstate.ReadLease(c, b, run)
		if err != nil {
			t.Fatal(err)
		}
		if !live {
			return
		}
		if err := clock.Sleep(c, clock.Real{}, 200*time.Millisecond); err != nil {
			t.Fatalf("lease of %s never expired on the server's clock: %v", run, err)
		}
	}
}

// RunLease checks leases, fencing and the fenced journal on a backend.
func RunLease(t *testing.T, open func(t *testing.T) teamstate.Backend) {
	long := teamstate.LeaseOptions{TTL: 10 * time.Minute}
	t.Run("AcquireHeldRelease", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		a, err := teamstate.Acquire(c, b, "r1", holder("a"), long)
		if err != nil {
			t.Fatal(err)
		}
		if a.Generation() != 1 || a.TookOver() != nil {
			t.Fatalf("first lease: generation %d, took over %v", a.Generation(), a.TookOver())
		}
		_, err = teamstate.Acquire(c, b, "r1", holder("b"), long)
		var held *teamstate.HeldError
		if !errors.As(err, &held) || !errors.Is(err, teamstate.ErrHeld) || held.Holder.Host != "a" || held.Generation != 1 {
			t.Fatalf("second acquire: %v, want a HeldError naming host a", err)
		}
		if err := a.Renew(c); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(c); err != nil {
			t.Fatal(err)
		}
		if err := a.Check(); !errors.Is(err, teamstate.ErrLeaseLost) {
			t.Fatalf("Check after Release: %v, want ErrLeaseLost", err)
		}
		bl, err := teamstate.Acquire(c, b, "r1", holder("b"), long)
		if err != nil {
			t.Fatalf("acquire after release: %v", err)
		}
		if bl.Generation() != 2 || bl.TookOver() == nil || !bl.TookOver().Released {
			t.Fatalf("after release: generation %d, took over %+v", bl.Generation(), bl.TookOver())
		}
	})
	t.Run("RacingAcquires", func(t *testing.T) {
		b := open(t)
		var mu sync.Mutex
		var winners []*teamstate.Lease
		errs := make([]error, 5)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := teamstate.Acquire(ctx(t), b, "r2", holder(fmt.Sprint("c", i)), long)
				errs[i] = err
				if err == nil {
					mu.Lock()
					winners = append(winners, l)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("%d of 5 racing controllers acquired the lease, want 1 (errors %v)", len(winners), errs)
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, teamstate.ErrHeld) {
				t.Errorf("loser: %v, want ErrHeld", err)
			}
		}
	})
	t.Run("TakeoverFencesTheOldWriter", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		// Both holders' own clocks are fake and stand still, so neither
		// self-fences however slow the machine is: this case proves the
		// server-side fence alone (expiry is the server's clock's call).
		frozen := teamstate.LeaseOptions{TTL: 2 * time.Second, Margin: time.Second, Clock: clock.NewFake(time.Unix(1e9, 0))}
		old, err := teamstate.Acquire(c, b, "r3", holder("old"), frozen)
		if err != nil {
			t.Fatal(err)
		}
		oldLog, err := teamstate.OpenRunLog(c, b, old, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oldLog.Append(c, "intent", "create", map[string]int{"n": 1}); err != nil {
			t.Fatal(err)
		}
		waitExpired(t, b, "r3")
		nw, err := teamstate.Acquire(c, b, "r3", holder("new"), frozen)
		if err != nil {
			t.Fatalf("take over an expired lease: %v", err)
		}
		if nw.Generation() != 2 || nw.TookOver() == nil || nw.TookOver().Holder.Host != "old" {
			t.Fatalf("takeover: generation %d, took over %+v", nw.Generation(), nw.TookOver())
		}
		newLog, err := teamstate.OpenRunLog(c, b, nw, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oldLog.Append(c, "intent", "create", map[string]int{"n": 2}); !errors.Is(err, teamstate.ErrLeaseLost) {
			t.Fatalf("old writer's append after takeover: %v, want ErrLeaseLost", err)
		}
		if err := old.Check(); !errors.Is(err, teamstate.ErrLeaseLost) {
			t.Fatalf("old lease after a lost append: %v, want ErrLeaseLost", err)
		}
		if err := old.Renew(c); !errors.Is(err, teamstate.ErrLeaseLost) {
			t.Fatalf("old renew: %v, want ErrLeaseLost", err)
		}
		if _, err := newLog.Append(c, "done", "create", nil); err != nil {
			t.Fatal(err)
		}
		es, err := teamstate.ReadRunLog(c, b, "r3")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d:%d:%s", e.Seq, e.Generation, e.Type))
		}
		want := "[1:1:takeover 2:1:intent 3:2:takeover 4:2:done]"
		if fmt.Sprint(got) != want {
			t.Fatalf("journal %v, want %s", got, want)
		}
	})
	t.Run("SelfFenceBeforeExpiry", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		fc := clock.NewFake(time.Unix(1e9, 0))
		o := teamstate.LeaseOptions{TTL: 10 * time.Minute, Margin: time.Minute, Clock: fc}
		l, err := teamstate.Acquire(c, b, "r4", holder("a"), o)
		if err != nil {
			t.Fatal(err)
		}
		log, err := teamstate.OpenRunLog(c, b, l, nil)
		if err != nil {
			t.Fatal(err)
		}
		fc.Advance(9*time.Minute - time.Nanosecond)
		if err := l.Check(); err != nil {
			t.Fatalf("before TTL-margin: %v", err)
		}
		fc.Advance(time.Nanosecond)
		if err := l.Check(); !errors.Is(err, teamstate.ErrFenced) {
			t.Fatalf("at TTL-margin without a renewal: %v, want ErrFenced", err)
		}
		if _, err := log.Append(c, "intent", "create", nil); !errors.Is(err, teamstate.ErrFenced) {
			t.Fatalf("append after fencing: %v, want ErrFenced", err)
		}
		if err := l.Renew(c); !errors.Is(err, teamstate.ErrFenced) {
			t.Fatalf("renew after fencing: %v, want ErrFenced (fencing is for good)", err)
		}
		// The server still holds the lease for the fenced controller's
		// remaining TTL: nobody can take over before it stopped.
		if _, err := teamstate.Acquire(c, b, "r4", holder("b"), o); !errors.Is(err, teamstate.ErrHeld) {
			t.Fatalf("acquire while the fenced lease is unexpired: %v, want ErrHeld", err)
		}
	})
	t.Run("RenewMovesTheDeadline", func(t *testing.T) {
		b := open(t)
		c := ctx(t)
		fc := clock.NewFake(time.Unix(1e9, 0))
		l, err := teamstate.Acquire(c, b, "r5", holder("a"), teamstate.LeaseOptions{TTL: 10 * time.Minute, Margin: time.Minute, Clock: fc})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			fc.Advance(5 * time.Minute)
			if err := l.Renew(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Check(); err != nil {
			t.Fatalf("after renewals every 5 of 9 minutes: %v", err)
		}
		rec, live, _, err := teamstate.ReadLease(c, b, "r5")
		if err != nil || !live || rec.Renewals != 5 || rec.Holder.Host != "a" {
			t.Fatalf("lease %+v live %v %v, want 5 renewals by a", rec, live, err)
		}
	})
}
