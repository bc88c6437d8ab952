// Package clock abstracts time so that every wait in vastrun can be driven
// by a test without sleeping.
//
// Contract: code that waits must select on ctx.Done() and a channel from
// [Clock.After]; it never calls time.Sleep. [Real] is the wall clock, [Fake]
// only moves when a test calls [Fake.Advance], and [Scaled] runs a multiple
// faster than the wall clock (the simulator's speed factor).
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

// Sleep waits d on c, or returns ctx.Err() if ctx ends first.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.After(d):
		return nil
	}
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Scaled runs Factor times faster than the wall clock, starting at Start.
// A factor of 60 turns a one-minute boot into one second.
type Scaled struct {
	Start   time.Time
	Factor  float64
	realRef time.Time
}

// NewScaled returns a clock reading start now and running factor times faster.
func NewScaled(start time.Time, factor float64) *Scaled {
	if factor <= 0 {
		factor = 1
	}
	return &Scaled{Start: start, Factor: factor, realRef: time.Now()}
}

func (s *Scaled) Now() time.Time {
	elapsed := time.Since(s.realRef)
	return s.Start.Add(time.Duration(float64(elapsed) * s.Factor))
}

// Wall is the wall-clock instant at which s reads t. A scaled clock runs
// ahead of the wall clock; Wall maps its instants back, so that what is
// reported to people and wall-clock clients never lies in the future.
func (s *Scaled) Wall(t time.Time) time.Time {
	return s.realRef.Add(time.Duration(float64(t.Sub(s.Start)) / s.Factor))
}

func (s *Scaled) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	time.AfterFunc(time.Duration(float64(d)/s.Factor), func() { ch <- s.Now() })
	return ch
}

// Fake is a manual clock for tests. Timers fire only inside Advance.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	// OnWait, when set, is called (without the lock held) each time a timer
	// is created; tests use it to advance time as soon as code starts waiting.
	OnWait func(d time.Duration)
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
	} else {
		f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), ch: ch})
	}
	hook := f.OnWait
	f.mu.Unlock()
	if hook != nil && d > 0 {
		hook(d)
	}
	return ch
}

// Advance moves the clock forward and fires every timer that is due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	kept := f.waiters[:0]
	var due []chan time.Time
	for _, w := range f.waiters {
		if !w.at.After(now) {
			due = append(due, w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
	f.mu.Unlock()
	for _, ch := range due {
		ch <- now
	}
}

// Waiters reports how many timers are pending; tests use it to know that
// the code under test has started waiting.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}
