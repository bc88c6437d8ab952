package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func answers(t *testing.T, out string) []HeartbeatAnswer {
	t.Helper()
	var as []HeartbeatAnswer
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var a HeartbeatAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("answer %q: %v", sc.Text(), err)
		}
		as = append(as, a)
	}
	return as
}

func request(seq uint64) string {
	b, _ := json.Marshal(NewHeartbeatRequest(seq))
	return string(b) + "\n"
}

func TestServeHeartbeatTouchesOncePerRequestUntilEOF(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	clk := clock.NewFake(t0)
	pr, pw := io.Pipe()
	var out bytes.Buffer
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() { done <- ServeHeartbeat(l, pr, lockedWriter{&mu, &out}, clk) }()

	pw.Write([]byte(request(1)))
	waitAnswers(t, &mu, &out, 1)
	if fi, err := os.Stat(l.Abs(Heartbeat)); err != nil || !fi.ModTime().Equal(t0) {
		t.Fatalf("after beat 1 the heartbeat is %v (%v), want touched at %s", fi, err, t0)
	}
	clk.Advance(7 * time.Second)
	pw.Write([]byte(request(2)))
	waitAnswers(t, &mu, &out, 2)
	pw.Close() // the controller closed the session (or its connection dropped)
	if err := <-done; err != nil {
		t.Fatalf("EOF ends the loop cleanly: %v", err)
	}
	as := answers(t, out.String())
	if len(as) != 2 {
		t.Fatalf("answers: %+v", as)
	}
	for i, a := range as {
		if a.Schema != HeartbeatSchema || a.SchemaVersion != SchemaVersion || a.Seq != uint64(i+1) || !a.OK || len(a.Errors) != 0 {
			t.Fatalf("answer %d: %+v", i, a)
		}
	}
	if as[0].PreviousAgeSeconds != nil {
		t.Fatalf("the first beat found a heartbeat aged %v; there was none", *as[0].PreviousAgeSeconds)
	}
	if as[1].PreviousAgeSeconds == nil || *as[1].PreviousAgeSeconds != 7 {
		t.Fatalf("the second beat's previous age: %v, want 7", as[1].PreviousAgeSeconds)
	}
	if fi, _ := os.Stat(l.Abs(Heartbeat)); !fi.ModTime().Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("heartbeat time %s, want %s", fi.ModTime(), t0.Add(7*time.Second))
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func waitAnswers(t *testing.T, mu *sync.Mutex, out *bytes.Buffer, n int) {
	t.Helper()
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(out.String(), "\n") >= n
	})
}

// eventually waits, in real time, for a goroutine under test to get there;
// it asserts nothing about how long that takes.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 3000 {
			t.Fatal("the condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServeHeartbeatRefusesWhatItDoesNotSpeak(t *testing.T) {
	for name, line := range map[string]string{
		"another schema":  `{"schema":"vastrun.agent.status","schema_version":1,"seq":3}`,
		"another version": `{"schema":"vastrun.agent.heartbeat","schema_version":2,"seq":3}`,
		"no schema":       `{"seq":3}`,
		"not JSON":        `beat`,
		"too long":        `{"schema":"` + strings.Repeat("x", maxHeartbeatLine) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			l := Layout{Home: t.TempDir()}
			var out bytes.Buffer
			// A valid request after the refused one is never served.
			err := ServeHeartbeat(l, strings.NewReader(line+"\n"+request(4)), &out, clock.NewFake(t0))
			if !errors.Is(err, ErrHeartbeatRefused) {
				t.Fatalf("err %v, want ErrHeartbeatRefused", err)
			}
			as := answers(t, out.String())
			if len(as) != 1 || as[0].OK || len(as[0].Errors) != 1 || !strings.HasPrefix(as[0].Errors[0], "refused: ") || as[0].Schema != HeartbeatSchema {
				t.Fatalf("answers: %+v", as)
			}
			if _, err := os.Stat(l.Abs(Heartbeat)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused request touched the heartbeat: %v", err)
			}
		})
	}
}

func TestServeHeartbeatReportsAFailedTouch(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(home+"/"+StateDir, []byte("not a directory"), 0o644)
	var out bytes.Buffer
	if err := ServeHeartbeat(Layout{Home: home}, strings.NewReader(request(1)), &out, clock.NewFake(t0)); err != nil {
		t.Fatal(err)
	}
	as := answers(t, out.String())
	if len(as) != 1 || as[0].OK || len(as[0].Errors) != 1 || !strings.Contains(as[0].Errors[0], "touch the heartbeat") {
		t.Fatalf("a failed touch must answer ok=false with the error: %+v", as)
	}
}

func TestDecodeHeartbeatAnswerRefusesAnotherSchemaOrSeq(t *testing.T) {
	good := `{"schema":"vastrun.agent.heartbeat","schema_version":1,"seq":5,"ok":true,"errors":[]}`
	if a, err := DecodeHeartbeatAnswer([]byte(good), 5); err != nil || !a.OK {
		t.Fatalf("good answer: %+v %v", a, err)
	}
	for name, c := range map[string]struct {
		b   string
		seq uint64
	}{
		"another seq":     {good, 6},
		"another version": {strings.Replace(good, `"schema_version":1`, `"schema_version":2`, 1), 5},
		"another schema":  {strings.Replace(good, "heartbeat", "status", 1), 5},
		"not JSON":        {"ok", 5},
	} {
		if _, err := DecodeHeartbeatAnswer([]byte(c.b), c.seq); !errors.Is(err, ErrSchema) {
			t.Errorf("%s: err %v, want ErrSchema", name, err)
		}
	}
}

// fakeTransport opens sessions served in-process by ServeHeartbeat on a
// real layout, as `agent heartbeat --serve` over SSH would be; drop cuts
// the current session as a dropped connection does.
type fakeTransport struct {
	l     Layout
	clk   clock.Clock
	mu    sync.Mutex
	opens int
	cur   *fakeSession
	// stall: sessions open but never answer (a hung connection).
	stall bool
	// gate, when set, holds every session's answers until it is closed (a
	// serve process slow to start).
	gate chan struct{}
	// serve, when set, answers instead of ServeHeartbeat.
	serve  func(r io.Reader, w io.Writer)
	closes int // sessions closed by the heartbeater
	writes int // requests written
}

type fakeSession struct {
	t       *fakeTransport
	pending chan []byte // requests, forwarded in order to the serve loop
	toR     *io.PipeReader
	toW     *io.PipeWriter
	fromR   *io.PipeReader
	fromW   *io.PipeWriter
	closed  chan struct{}
	once    sync.Once
}

func (f *fakeTransport) open(ctx context.Context) (HeartbeatPipe, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	s := &fakeSession{t: f, closed: make(chan struct{}), pending: make(chan []byte, 64)}
	s.toR, s.toW = io.Pipe()
	s.fromR, s.fromW = io.Pipe()
	go func() {
		for b := range s.pending {
			if _, err := s.toW.Write(b); err != nil {
				return
			}
		}
	}()
	if !f.stall {
		gate := f.gate
		go func() {
			if gate != nil {
				<-gate
			}
			if f.serve != nil {
				f.serve(s.toR, s.fromW)
				return
			}
			err := ServeHeartbeat(f.l, s.toR, s.fromW, f.clk)
			s.fromW.CloseWithError(errors.Join(err, io.EOF))
		}()
	}
	f.cur = s
	return s, nil
}

func (f *fakeTransport) drop() {
	f.mu.Lock()
	s := f.cur
	f.mu.Unlock()
	err := errors.New("connection reset")
	s.once.Do(func() { close(s.closed) }) // later writes fail, as on a reset socket
	s.toW.CloseWithError(err)
	s.fromR.CloseWithError(err)
	s.fromW.CloseWithError(err)
}

func (f *fakeTransport) counts() (opens, closes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens, f.closes
}

func (s *fakeSession) Read(p []byte) (int, error) { return s.fromR.Read(p) }
func (s *fakeSession) Write(p []byte) (int, error) {
	select {
	case <-s.closed:
		return 0, io.ErrClosedPipe
	default:
	}
	s.t.mu.Lock()
	s.t.writes++
	s.t.mu.Unlock()
	select {
	case s.pending <- append([]byte(nil), p...): // as a socket buffers it
		return len(p), nil
	default:
		return 0, errors.New("fake session: too many requests in flight")
	}
}
func (s *fakeSession) Close() error {
	s.once.Do(func() {
		close(s.closed)
		s.t.mu.Lock()
		s.t.closes++
		s.t.mu.Unlock()
		s.toW.CloseWithError(io.ErrClosedPipe)
		s.fromR.Close()
		s.fromW.Close()
	})
	return nil
}

// waitIdle waits until the heartbeater has made n beats (answered or not)
// and waits on waiters timers: its pause before the next beat included.
func waitIdle(t *testing.T, h *Heartbeater, clk *clock.Fake, n, waiters int) {
	t.Helper()
	eventually(t, func() bool {
		st := h.Stats()
		return st.Beats+st.Failed == n && clk.Waiters() == waiters
	})
}

// A dropped connection costs one failed beat and one new session: the
// beats resume on it, and the heartbeat keeps the controller's time.
func TestHeartbeaterResumesAfterOneRedial(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	clk := clock.NewFake(t0)
	ft := &fakeTransport{l: l, clk: clk}
	// Timeout is long, so each beat's deadline stays pending: the waiters
	// are n deadlines plus the pause.
	h := &Heartbeater{Open: ft.open, Every: 10 * time.Second, Retry: 2 * time.Second, Timeout: time.Hour, Clock: clk}
	h.Start(context.Background())
	defer h.Stop()

	waitIdle(t, h, clk, 1, 2)
	clk.Advance(10 * time.Second)
	waitIdle(t, h, clk, 2, 3)
	if st := h.Stats(); st.Beats != 2 || st.Sessions != 1 {
		t.Fatalf("two beats on one session: %+v", st)
	}

	ft.drop()
	clk.Advance(10 * time.Second) // this beat meets the dropped session
	waitIdle(t, h, clk, 3, 4)
	if st := h.Stats(); st.Failed != 1 || st.LastErr == nil {
		t.Fatalf("the beat on a dropped session failed: %+v", st)
	}
	clk.Advance(2 * time.Second) // the retry, on a new session
	waitIdle(t, h, clk, 4, 5)
	clk.Advance(10 * time.Second)
	waitIdle(t, h, clk, 5, 6)

	st := h.Stop()
	opens, _ := ft.counts()
	if st.Beats != 4 || st.Failed != 1 || st.Sessions != 2 || opens != 2 {
		t.Fatalf("after one drop: %+v, %d opens; want 4 beats, 1 failure, 2 sessions (one redial)", st, opens)
	}
	if fi, err := os.Stat(l.Abs(Heartbeat)); err != nil || !fi.ModTime().Equal(clk.Now()) {
		t.Fatalf("the last beat did not touch the heartbeat at %s: %v %v", clk.Now(), fi, err)
	}
	if st.LastAgeSeconds == nil || *st.LastAgeSeconds != 10 {
		t.Fatalf("the agent saw the heartbeat aged %v before the last beat, want 10", st.LastAgeSeconds)
	}
}

// A session that stops answering is closed once it has been silent for
// Stall, and the next beat opens a new one: a stall never blocks the beats.
func TestHeartbeaterAbandonsAStalledSession(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	clk := clock.NewFake(t0)
	ft := &fakeTransport{l: l, clk: clk, stall: true}
	h := &Heartbeater{Open: ft.open, Every: 10 * time.Second, Retry: 2 * time.Second, Timeout: 3 * time.Second, Stall: 3 * time.Second, Clock: clk}
	h.Start(context.Background())
	defer h.Stop()

	// Beat 1 is sent and waits on its deadline.
	eventually(t, func() bool { ft.mu.Lock(); defer ft.mu.Unlock(); return ft.writes == 1 && clk.Waiters() == 1 })
	clk.Advance(3 * time.Second)
	waitIdle(t, h, clk, 1, 1)                                                   // failed; now in the retry pause
	eventually(t, func() bool { _, closes := ft.counts(); return closes == 1 }) // the stalled session is closed
	if st := h.Stats(); !errors.Is(st.LastErr, ErrBeatTimeout) {
		t.Fatalf("want a beat timeout: %+v", st)
	}
	ft.mu.Lock()
	ft.stall = false // the new connection answers
	ft.mu.Unlock()
	clk.Advance(2 * time.Second)
	eventually(t, func() bool { return h.Stats().Beats == 1 })
	opens, _ := ft.counts()
	if st := h.Stats(); st.Sessions != 2 || opens != 2 {
		t.Fatalf("after a stall: %+v, %d opens", st, opens)
	}
}

// An agent that answers in another protocol stops the beats with ErrSchema:
// retrying cannot change it.
func TestHeartbeaterStopsOnAnotherProtocol(t *testing.T) {
	clk := clock.NewFake(t0)
	ft := &fakeTransport{clk: clk, serve: func(r io.Reader, w io.Writer) {
		bufio.NewReader(r).ReadString('\n')
		w.Write([]byte(`{"schema":"vastrun.agent.heartbeat","schema_version":9,"seq":1,"ok":true}` + "\n"))
	}}
	h := &Heartbeater{Open: ft.open, Every: time.Second, Timeout: time.Hour, Clock: clk}
	h.Start(context.Background())
	eventually(t, func() bool { return h.Err() != nil })
	st := h.Stop()
	if !errors.Is(h.Err(), ErrSchema) || st.Beats != 0 || st.Failed != 1 {
		t.Fatalf("another protocol: %v, %+v", h.Err(), st)
	}
}

// A serve process slow to start (a busy instance) costs a failed beat, not
// a new session: the next beat goes on the same one, and the late answer to
// the first counts as the session's sign of life.
func TestHeartbeaterKeepsASlowSession(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	clk := clock.NewFake(t0)
	gate := make(chan struct{})
	ft := &fakeTransport{l: l, clk: clk, gate: gate}
	h := &Heartbeater{Open: ft.open, Every: 10 * time.Second, Retry: 2 * time.Second, Timeout: time.Second, Stall: 30 * time.Second, Clock: clk}
	h.Start(context.Background())
	defer h.Stop()

	eventually(t, func() bool { ft.mu.Lock(); defer ft.mu.Unlock(); return ft.writes == 1 && clk.Waiters() == 1 })
	clk.Advance(time.Second) // beat 1 times out; the session is kept
	waitIdle(t, h, clk, 1, 1)
	if st := h.Stats(); st.Failed != 1 || !errors.Is(st.LastErr, ErrBeatTimeout) {
		t.Fatalf("beat 1: %+v", st)
	}
	close(gate) // the serve process is up: it answers beat 1, late
	clk.Advance(2 * time.Second)
	waitIdle(t, h, clk, 2, 2)
	st := h.Stop()
	opens, _ := ft.counts()
	if st.Beats != 1 || st.Failed != 1 || st.Sessions != 1 || opens != 1 {
		t.Fatalf("a slow session: %+v, %d opens; want one session kept", st, opens)
	}
}

// A session slow to open (a loaded SSH server) is waited on by the next
// beat, not opened again: a slow open costs beats, never a process a beat.
func TestHeartbeaterKeepsASlowOpen(t *testing.T) {
	l := Layout{Home: t.TempDir()}
	clk := clock.NewFake(t0)
	ft := &fakeTransport{l: l, clk: clk}
	gate := make(chan struct{})
	open := func(ctx context.Context) (HeartbeatPipe, error) {
		<-gate
		return ft.open(ctx)
	}
	h := &Heartbeater{Open: open, Every: 10 * time.Second, Retry: 2 * time.Second, Timeout: time.Second, Stall: 30 * time.Second, Clock: clk}
	h.Start(context.Background())
	defer h.Stop()

	eventually(t, func() bool { return clk.Waiters() == 1 }) // beat 1 waits on the open
	clk.Advance(time.Second)
	waitIdle(t, h, clk, 1, 1)
	close(gate) // the session opens now, after beat 1 gave up on it
	clk.Advance(2 * time.Second)
	eventually(t, func() bool { return h.Stats().Beats == 1 })
	st := h.Stop()
	opens, _ := ft.counts()
	if st.Failed != 1 || st.Sessions != 1 || opens != 1 {
		t.Fatalf("a slow open: %+v, %d opens; want the one open kept", st, opens)
	}
}
