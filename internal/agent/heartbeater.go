package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// HeartbeatPipe is one open `agent heartbeat --serve` session, as the
// controller's transport gives it: requests are written to it, answers
// read from it, and Close ends the session. Open redials when the
// connection is gone; finding a stalled connection dead is the
// transport's own keepalive's job (remote.Dialer.KeepAlive), never a guess
// from one slow beat, which would cut every other call on it.
type HeartbeatPipe = io.ReadWriteCloser

// ErrBeatTimeout means a beat (opening the session included) was not
// answered within [Heartbeater.Timeout].
var ErrBeatTimeout = errors.New("heartbeat not answered in time")

// Heartbeater is the controller's side of the dead-man switch: it beats
// every Every over a session that Open opens (and opens again after any
// failure), so the agent on the instance knows the controller lives. A
// failed beat is an error, never a "no": it is retried at the next beat on
// a new session, and a transport failure redials (through Open). Only an
// answer in another schema stops it (see Err): that agent speaks another
// protocol and no retry will change it.
//
// Contract: Every is well under the agent's TTL (TTL/3 is what training
// uses), so one failed beat, or one redial, never lets the heartbeat lapse.
type Heartbeater struct {
	Open  func(ctx context.Context) (HeartbeatPipe, error)
	Every time.Duration // between beats
	// Timeout bounds one beat, opening its session included (default
	// Every): a beat not answered by then has failed, and the next one is
	// sent on the same session (a slow start of the serve process on a busy
	// instance costs beats, not a new process each time).
	Timeout time.Duration
	// Stall is how long a session may leave every beat unanswered before
	// it is closed and a new one opened (default 3×Every,
	// about the agent's TTL): a hung session or connection is never waited
	// on for longer.
	Stall time.Duration
	// Retry is the wait after a failed beat (default Every/3), so a lost
	// beat is made up well before the next regular one.
	Retry time.Duration
	// Clock paces the beats. It must run like the clock the agent checks
	// the TTL on (the instance's wall clock).
	Clock clock.Clock
	// Logf, when set, hears about failed beats (for debugging).
	Logf func(format string, args ...any)

	mu     sync.Mutex
	stats  HeartbeatStats
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// HeartbeatStats count what a Heartbeater did.
type HeartbeatStats struct {
	Beats    int // answered with ok
	Failed   int // not answered, refused, or answered not ok
	Sessions int // sessions opened (the first, then one per failure)
	Last     time.Time
	LastErr  error
	// LastAgeSeconds is the heartbeat's age the agent saw before the last
	// answered beat touched it.
	LastAgeSeconds *float64
}

// Start begins beating (the first beat at once) until ctx ends or Stop.
func (h *Heartbeater) Start(ctx context.Context) {
	if h.Clock == nil {
		h.Clock = clock.Real{}
	}
	if h.Timeout <= 0 {
		h.Timeout = h.Every
	}
	if h.Stall <= 0 {
		h.Stall = 3 * h.Every
	}
	if h.Retry <= 0 {
		h.Retry = max(h.Every/3, time.Millisecond)
	}
	ctx, cancel := context.WithCancel(ctx)
	h.mu.Lock()
	h.cancel, h.done = cancel, make(chan struct{})
	h.mu.Unlock()
	go h.loop(ctx)
}

// Stop ends the beats, closes the session and returns what was done. It
// does not wait on a stalled session: the transport's Close ends that.
func (h *Heartbeater) Stop() HeartbeatStats {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return h.Stats()
}

// Stats is what was done so far.
func (h *Heartbeater) Stats() HeartbeatStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// Err is the protocol error that stopped the beats (ErrSchema), if any.
func (h *Heartbeater) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// session is an open pipe and the lines read from it.
type session struct {
	p     HeartbeatPipe
	lines chan []byte // closed when the pipe ends
	// heard is when the session last answered (or opened).
	heard time.Time
}

func (h *Heartbeater) loop(ctx context.Context) {
	defer close(h.done)
	var s *session
	var op *opening
	defer func() {
		if s != nil {
			p := s.p
			// Never wait on a stalled transport to stop; the session is
			// given up, so how its close went changes nothing.
			go func() { _ = p.Close() }()
		}
		if op != nil {
			op.drop()
		}
	}()
	var seq uint64
	for {
		seq++
		a, err := h.beat(ctx, &s, &op, seq)
		if ctx.Err() != nil {
			return
		}
		wait := h.Every
		h.mu.Lock()
		h.stats.Last = h.Clock.Now()
		switch err {
		case nil:
			h.stats.Beats++
			h.stats.LastAgeSeconds = a.PreviousAgeSeconds
		default:
			h.stats.Failed++
			h.stats.LastErr = err
			wait = h.Retry
		}
		h.mu.Unlock()
		if err != nil && h.Logf != nil {
			h.Logf("heartbeat %d failed: %v", seq, err)
		}
		if errors.Is(err, ErrSchema) {
			h.mu.Lock()
			h.err = err
			h.mu.Unlock()
			return
		}
		if err := clock.Sleep(ctx, h.Clock, wait); err != nil {
			return
		}
	}
}

// beat sends request seq and waits for its answer, all within Timeout. A
// session that ended, answered wrongly, or left beats unanswered for Stall
// is closed, and the next beat opens a new one.
func (h *Heartbeater) beat(ctx context.Context, sp **session, op **opening, seq uint64) (HeartbeatAnswer, error) {
	deadline := h.Clock.After(h.Timeout)
	fail := func(err error) (HeartbeatAnswer, error) {
		if *sp != nil {
			// In the background: closing writes to the connection, and a
			// stalled one must not hold the next beat. The session is
			// given up: how its close went changes nothing.
			p := (*sp).p
			go func() { _ = p.Close() }()
			*sp = nil
		}
		return HeartbeatAnswer{}, err
	}
	if *sp == nil {
		s, err := h.open(ctx, op, deadline)
		if err != nil {
			return HeartbeatAnswer{}, err
		}
		*sp = s
	}
	s := *sp
	line, _ := json.Marshal(NewHeartbeatRequest(seq))
	// A request line is far below any SSH window, so the write does not
	// wait on the peer; only the answer can stall.
	if _, err := s.p.Write(append(line, '\n')); err != nil {
		return fail(fmt.Errorf("send heartbeat %d: %w", seq, err))
	}
	for {
		select {
		case <-ctx.Done():
			return HeartbeatAnswer{}, ctx.Err()
		case <-deadline:
			err := fmt.Errorf("heartbeat %d: %w (%s)", seq, ErrBeatTimeout, h.Timeout)
			if silent := h.Clock.Now().Sub(s.heard); silent >= h.Stall {
				return fail(fmt.Errorf("%w; the session has not answered for %s", err, silent))
			}
			return HeartbeatAnswer{}, err
		case b, ok := <-s.lines:
			if !ok {
				return fail(fmt.Errorf("heartbeat %d: the session ended without an answer", seq))
			}
			a, err := decodeHeartbeatAnswer(b)
			if err == nil && a.Seq > seq {
				err = fmt.Errorf("%w: heartbeat answer %d for request %d", ErrSchema, a.Seq, seq)
			}
			if err != nil {
				return fail(err)
			}
			s.heard = h.Clock.Now()
			if a.Seq < seq {
				continue // a late answer to a beat that timed out: it did touch
			}
			if !a.OK {
				return fail(fmt.Errorf("heartbeat %d: the agent did not touch the heartbeat: %v", seq, a.Errors))
			}
			return a, nil
		}
	}
}

// opened is the result of one Open.
type opened struct {
	p   HeartbeatPipe
	err error
}

// opening is an Open in flight: a beat that gives up on it leaves it to the
// next beat, so a session slow to open on a busy machine is not thrown away
// (and its process started again) at every beat.
type opening struct {
	ch     chan opened
	since  time.Time
	cancel context.CancelFunc
}

// drop gives up on the open: what it opens later is closed.
func (o *opening) drop() {
	o.cancel()
	go func() {
		if r := <-o.ch; r.p != nil {
			_ = r.p.Close() // given up before it was used: nothing to lose
		}
	}()
}

// open opens a session (or waits on the open in flight) before deadline.
// An open in flight for Stall is given up and started again.
func (h *Heartbeater) open(ctx context.Context, op **opening, deadline <-chan time.Time) (*session, error) {
	if *op != nil && h.Clock.Now().Sub((*op).since) >= h.Stall {
		(*op).drop()
		*op = nil
	}
	if *op == nil {
		octx, cancel := context.WithCancel(ctx)
		o := &opening{ch: make(chan opened, 1), since: h.Clock.Now(), cancel: cancel}
		go func() {
			p, err := h.Open(octx)
			o.ch <- opened{p, err}
		}()
		h.mu.Lock()
		h.stats.Sessions++
		h.mu.Unlock()
		*op = o
	}
	o := *op
	var r opened
	select {
	case r = <-o.ch:
		*op = nil
	case <-ctx.Done():
		return nil, ctx.Err() // the loop drops the open
	case <-deadline:
		return nil, fmt.Errorf("open the heartbeat session: %w (%s)", ErrBeatTimeout, h.Timeout)
	}
	if r.err != nil {
		o.cancel()
		return nil, fmt.Errorf("open the heartbeat session: %w", r.err)
	}
	stop := make(chan struct{})
	s := &session{p: &closer{HeartbeatPipe: r.p, cancel: o.cancel, stop: stop}, lines: make(chan []byte, 1), heard: h.Clock.Now()}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(r.p)
		sc.Buffer(make([]byte, 0, 512), 64<<10)
		for sc.Scan() {
			select {
			case s.lines <- append([]byte(nil), sc.Bytes()...):
			case <-stop: // closed: a late answer is nobody's
				return
			}
		}
	}()
	return s, nil
}

// closer releases the open's context and the reader with the session.
type closer struct {
	HeartbeatPipe
	cancel context.CancelFunc
	stop   chan struct{}
	once   sync.Once
}

func (c *closer) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		err = c.HeartbeatPipe.Close()
		c.cancel()
	})
	return err
}
