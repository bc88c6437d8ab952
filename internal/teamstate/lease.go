package teamstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// LeaseSchema names the lease object's format.
const LeaseSchema = "vastrun.state.lease"

// Lease errors; callers classify with errors.Is (HeldError matches ErrHeld).
var (
	// ErrHeld: another controller holds a live lease on the run.
	ErrHeld = errors.New("run is driven by another controller")
	// ErrLeaseLost: the lease was taken over or released; stop at once.
	ErrLeaseLost = errors.New("lease lost to another controller")
	// ErrFenced: no renewal succeeded in time; this controller stopped
	// its side effects before anyone else could take the lease over.
	ErrFenced = errors.New("lease self-fenced: no renewal reached the state backend in time")
)

// Holder says who drives a run. ID is random per process, so two
// processes on one host (or a pid reused) are never confused.
type Holder struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	ID    string `json:"id"`
	User  string `json:"user,omitempty"`
	CIJob string `json:"ci_job,omitempty"` // CI job URL when in CI
}

func (h Holder) String() string {
	s := fmt.Sprintf("%s pid %d", h.Host, h.PID)
	if h.CIJob != "" {
		s += " (" + h.CIJob + ")"
	}
	return s
}

// ThisProcess describes the calling process, with a fresh random ID.
func ThisProcess(getenv func(string) string) Holder {
	if getenv == nil {
		getenv = os.Getenv
	}
	host, _ := os.Hostname()
	h := Holder{Host: host, PID: os.Getpid(), ID: NewID(), User: getenv("USER")}
	if s, r, id := getenv("GITHUB_SERVER_URL"), getenv("GITHUB_REPOSITORY"), getenv("GITHUB_RUN_ID"); s != "" && r != "" && id != "" {
		h.CIJob = s + "/" + r + "/actions/runs/" + id
	} else if u := getenv("CI_JOB_URL"); u != "" {
		h.CIJob = u
	}
	return h
}

// NewID is 16 random hex digits.
func NewID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// LeaseRecord is the body of runs/<id>/lease.json.
type LeaseRecord struct {
	Schema     string `json:"schema"`
	V          int    `json:"v"`
	Run        string `json:"run"`
	Holder     Holder `json:"holder"`
	Generation int64  `json:"generation"`
	TTLMillis  int64  `json:"ttl_ms"`
	// Renewals changes on every renewal so that each write has new bytes.
	Renewals int64 `json:"renewals"`
	Released bool  `json:"released,omitempty"`
}

// TTL is the record's time to live.
func (r LeaseRecord) TTL() time.Duration { return time.Duration(r.TTLMillis) * time.Millisecond }

// LeaseKey is where a run's lease lives.
func LeaseKey(run string) string { return "runs/" + run + "/lease.json" }

// HeldError reports the live holder of a run.
type HeldError struct {
	Run        string
	Holder     Holder
	Generation int64
	// ExpiresIn is how long the lease has left unless renewed, on the
	// server's clock.
	ExpiresIn time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("run %s is driven by %s (lease generation %d, expires in %s unless renewed)",
		e.Run, e.Holder, e.Generation, e.ExpiresIn.Round(time.Second))
}

func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// LeaseOptions tune Acquire.
type LeaseOptions struct {
	TTL time.Duration // default 30s
	// Margin is how long before TTL the holder self-fences (default TTL/4,
	// at least one second to absorb the Date header's resolution).
	Margin time.Duration
	// Clock is the holder's own clock; only durations on it matter.
	Clock clock.Clock
}

func (o LeaseOptions) norm() LeaseOptions {
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	if o.Margin <= 0 {
		o.Margin = max(o.TTL/4, time.Second)
	}
	if o.Margin >= o.TTL {
		o.Margin = o.TTL / 2
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return o
}

// Lease is a held run lease.
type Lease struct {
	b    Backend
	key  string
	opts LeaseOptions

	io       sync.Mutex // serializes writes of the lease object
	mu       sync.Mutex
	rec      LeaseRecord
	etag     string
	deadline time.Time // on opts.Clock: fence at or after this
	err      error     // ErrLeaseLost or ErrFenced once it happened, forever
	done     chan struct{}
	// TookOver is set when Acquire replaced an expired or released lease.
	tookOver *LeaseRecord
}

// expired judges rec by the server's clock.
func expired(o Object, rec LeaseRecord, serverNow time.Time) (bool, time.Duration) {
	if rec.Released {
		return true, 0
	}
	if serverNow.IsZero() {
		return false, rec.TTL() // no server clock: fail closed
	}
	left := o.LastModified.Add(rec.TTL()).Sub(serverNow)
	return left < 0, left
}

// Acquire takes the run's lease: it creates it when absent, or takes over
// one that is released or expired on the server's clock with generation+1.
// A live lease yields a *HeldError naming its holder.
func Acquire(ctx context.Context, b Backend, run string, h Holder, o LeaseOptions) (*Lease, error) {
	o = o.norm()
	key := LeaseKey(run)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		rec := LeaseRecord{Schema: LeaseSchema, V: 1, Run: run, Holder: h, Generation: 1, TTLMillis: o.TTL.Milliseconds()}
		cur, serverNow, err := b.Get(ctx, key)
		var prev *LeaseRecord
		sent := o.Clock.Now()
		var etag string
		switch {
		case errors.Is(err, ErrNotExist):
			data, _ := json.Marshal(rec)
			etag, err = b.PutIfAbsent(ctx, key, data)
		case err != nil:
			return nil, fmt.Errorf("acquire lease of run %s: %w", run, err)
		default:
			var old LeaseRecord
			if err := json.Unmarshal(cur.Data, &old); err != nil || old.Schema != LeaseSchema {
				return nil, fmt.Errorf("acquire lease of run %s: %s is not a lease record; refusing to touch it", run, key)
			}
			if gone, left := expired(cur, old, serverNow); !gone {
				return nil, &HeldError{Run: run, Holder: old.Holder, Generation: old.Generation, ExpiresIn: left}
			}
			prev = &old
			rec.Generation = old.Generation + 1
			data, _ := json.Marshal(rec)
			etag, err = b.PutIfMatch(ctx, key, data, cur.ETag)
		}
		if errors.Is(err, ErrPrecondition) && attempt < 8 {
			continue // someone else wrote in between: judge again
		}
		if err != nil {
			return nil, fmt.Errorf("acquire lease of run %s: %w", run, err)
		}
		return &Lease{b: b, key: key, opts: o, rec: rec, etag: etag, deadline: sent.Add(o.TTL - o.Margin),
			done: make(chan struct{}), tookOver: prev}, nil
	}
}

// Record is the lease as last written by this holder.
func (l *Lease) Record() LeaseRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

// Generation is the fencing token written into every journal entry.
func (l *Lease) Generation() int64 { return l.Record().Generation }

// TookOver is the lease this one replaced (expired or released), or nil.
func (l *Lease) TookOver() *LeaseRecord { return l.tookOver }

// Done is closed once the lease is lost or fenced.
func (l *Lease) Done() <-chan struct{} { return l.done }

func (l *Lease) failLocked(err error) {
	if l.err == nil {
		l.err = err
		close(l.done)
	}
}

// Check is the fence before a side effect: nil while the lease is held
// and its deadline has not passed on the holder's clock. It does no I/O.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

func (l *Lease) checkLocked() error {
	if l.err != nil {
		return l.errorLocked()
	}
	if !l.opts.Clock.Now().Before(l.deadline) {
		l.failLocked(ErrFenced)
		return l.errorLocked()
	}
	return nil
}

func (l *Lease) errorLocked() error {
	return fmt.Errorf("run %s, lease generation %d: %w", l.rec.Run, l.rec.Generation, l.err)
}

// Renew extends the lease (If-Match on its ETag). A lost race means the
// lease was taken over: ErrLeaseLost, for good. An unreachable backend
// leaves the lease as it was; the deadline then decides. Check never waits
// for a Renew in flight.
func (l *Lease) Renew(ctx context.Context) error {
	return l.write(ctx, false)
}

func (l *Lease) write(ctx context.Context, release bool) error {
	l.io.Lock()
	defer l.io.Unlock()
	l.mu.Lock()
	if err := l.checkLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	next, etag := l.rec, l.etag
	l.mu.Unlock()
	next.Renewals++
	next.Released = release
	data, _ := json.Marshal(next)
	sent := l.opts.Clock.Now()
	// A request that hangs must not outlive the lease's usefulness.
	ctx, cancel := context.WithTimeout(ctx, l.opts.TTL/3+time.Second)
	defer cancel()
	newETag, err := l.b.PutIfMatch(ctx, l.key, data, etag)
	l.mu.Lock()
	defer l.mu.Unlock()
	op := "renew"
	if release {
		op = "release"
	}
	if errors.Is(err, ErrPrecondition) {
		l.failLocked(ErrLeaseLost)
		return l.errorLocked()
	}
	if err != nil {
		return fmt.Errorf("%s lease of run %s: %w", op, l.rec.Run, err)
	}
	if release {
		l.rec = next
		l.failLocked(ErrLeaseLost)
		return nil
	}
	if err := l.checkLocked(); err != nil {
		return err // fenced while the write was in flight: too late to trust
	}
	if !sent.Before(l.deadline) {
		l.failLocked(ErrFenced)
		return l.errorLocked()
	}
	l.rec, l.etag, l.deadline = next, newETag, sent.Add(l.opts.TTL-l.opts.Margin)
	return nil
}

// Keep renews every TTL/3 until ctx ends or the lease is lost or fenced;
// it returns why it stopped. Run it on its own goroutine and select on
// Done in the work it guards.
func (l *Lease) Keep(ctx context.Context) error {
	every := l.opts.TTL / 3
	for {
		l.mu.Lock()
		untilFence := l.deadline.Sub(l.opts.Clock.Now())
		l.mu.Unlock()
		wait := min(every, max(untilFence, 0))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return l.Check()
		case <-l.opts.Clock.After(wait):
		}
		if err := l.Check(); err != nil {
			return err
		}
		if err := l.Renew(ctx); errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrFenced) {
			return err
		}
	}
}

// Release hands the lease back with a tombstone written If-Match, so a
// successor may take it at once. Conditional DELETE is not on every S3
// server; a conditional PUT is. After Release the lease reads as lost.
func (l *Lease) Release(ctx context.Context) error {
	return l.write(ctx, true)
}

// ReadLease reads a run's lease and says whether it is live on the
// server's clock, and for how long.
func ReadLease(ctx context.Context, b Backend, run string) (rec LeaseRecord, live bool, left time.Duration, err error) {
	o, now, err := b.Get(ctx, LeaseKey(run))
	if err != nil {
		return LeaseRecord{}, false, 0, fmt.Errorf("read lease of run %s: %w", run, err)
	}
	if err := json.Unmarshal(o.Data, &rec); err != nil || rec.Schema != LeaseSchema {
		return LeaseRecord{}, false, 0, fmt.Errorf("read lease of run %s: not a lease record", run)
	}
	gone, left := expired(o, rec, now)
	return rec, !gone, left, nil
}
