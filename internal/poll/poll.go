// Package poll waits for a condition by calling a function on an injected
// clock, with one backoff policy for every wait in vastrun.
//
// Contract of [Until]:
//   - f is called at once, then after each wait; the wait starts at
//     Policy.Initial and grows by Policy.Factor up to Policy.Max.
//   - f returning done=true ends the wait with nil.
//   - An error for which Policy.Permanent is true (default: provider.ErrAuth)
//     ends the wait with that error: retrying cannot help.
//   - An error for which Policy.Throttled is true (default:
//     provider.ErrRateLimited, a 429) doubles the wait, up to twice Max.
//   - An error that asks for a wait (Policy.AtLeast; default: an
//     *provider.APIError's RetryAfter) makes the next wait at least that
//     long, deadline permitting.
//   - Any other error is transient: the wait goes on, and it is returned
//     (wrapped in ErrDeadline) if the deadline passes before f succeeds.
//   - The context ending ends the wait with ctx.Err(), never a stale f error.
//   - Waits are clipped to Policy.Deadline, and f is called one last time
//     at the deadline before ErrDeadline is returned.
//
// It never sleeps on the wall clock: every wait is a [clock.Clock] timer.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
)

// Policy shapes the waits between calls.
type Policy struct {
	Initial time.Duration // first wait; default 1s
	Max     time.Duration // longest wait; default 15s
	Factor  float64       // growth per wait; default 2
	// Jitter, when set, returns values in [0,1) that spread each wait by
	// ±20%, so that many controllers do not poll in step.
	Jitter func() float64
	// Deadline, when set, ends the wait with ErrDeadline once passed.
	Deadline time.Time
	// Limit, when set, is asked before each wait for the longest wait now,
	// in place of Max (a caller that knows the condition is near polls
	// closer).
	Limit func() time.Duration
	// Permanent and Throttled classify f's errors; nil means the defaults
	// named in the package documentation.
	Permanent func(error) bool
	Throttled func(error) bool
	// AtLeast is the wait an error asks for (zero: none); nil means the
	// default named in the package documentation.
	AtLeast func(error) time.Duration
	// Notify, when set, is told of each error of f that a wait follows,
	// and of that wait (a retry decorator's log line).
	Notify func(err error, wait time.Duration)
}

// ErrDeadline means the deadline passed before the condition held. Until
// returns it as a *DeadlineError.
var ErrDeadline = errors.New("deadline passed")

// DeadlineError is the deadline passing; Last is f's error on its last
// call (nil if that call just found the condition false).
type DeadlineError struct{ Last error }

func (e *DeadlineError) Error() string {
	if e.Last == nil {
		return ErrDeadline.Error()
	}
	return fmt.Sprintf("%v (last: %v)", ErrDeadline, e.Last)
}

// Is makes errors.Is(err, ErrDeadline) true.
func (e *DeadlineError) Is(target error) bool { return target == ErrDeadline }

// Unwrap gives f's last error, so errors.Is sees through to it.
func (e *DeadlineError) Unwrap() error { return e.Last }

// Until calls f until it reports done, on clk, as the package describes.
func Until(ctx context.Context, clk clock.Clock, p Policy, f func(ctx context.Context) (done bool, err error)) error {
	wait := p.Initial
	if wait <= 0 {
		wait = time.Second
	}
	maxWait := p.Max
	if maxWait <= 0 {
		maxWait = 15 * time.Second
	}
	factor := p.Factor
	if factor < 1 {
		factor = 2
	}
	permanent := p.Permanent
	if permanent == nil {
		permanent = func(err error) bool { return errors.Is(err, provider.ErrAuth) || IsPermanent(err) }
	}
	throttled := p.Throttled
	if throttled == nil {
		throttled = func(err error) bool { return errors.Is(err, provider.ErrRateLimited) }
	}
	atLeast := p.AtLeast
	if atLeast == nil {
		atLeast = RetryAfter
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done, err := f(ctx)
		if done && err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && permanent(err) {
			return err
		}
		if p.Limit != nil {
			if l := p.Limit(); l > 0 {
				wait = min(wait, l)
			}
		}
		next := wait
		if err != nil && throttled(err) {
			next = min(2*wait, 2*maxWait)
		}
		if p.Jitter != nil {
			next = time.Duration(float64(next) * (0.8 + 0.4*p.Jitter()))
		}
		if err != nil {
			next = max(next, atLeast(err))
		}
		if !p.Deadline.IsZero() {
			left := p.Deadline.Sub(clk.Now())
			if left <= 0 {
				return &DeadlineError{Last: err}
			}
			next = min(next, left)
		}
		next = max(next, time.Millisecond)
		if err != nil && p.Notify != nil {
			p.Notify(err, next)
		}
		if err := clock.Sleep(ctx, clk, next); err != nil {
			return err
		}
		if err != nil && throttled(err) {
			wait = min(2*wait, 2*maxWait)
		} else {
			wait = min(time.Duration(float64(wait)*factor), maxWait)
		}
	}
}

// IsPermanent reports whether err says of itself (a Permanent() bool
// method, anywhere in its chain) that retrying cannot help: a controller
// that lost its lease, for one. Until stops on such an error at once.
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// RetryAfter is the wait the server asked for in err (an
// *provider.APIError's Retry-After), zero when none.
func RetryAfter(err error) time.Duration {
	var ae *provider.APIError
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		return ae.RetryAfter
	}
	return 0
}
