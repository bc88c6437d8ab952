package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// instant never waits: retries are free in tests.
type instant struct{}

func (instant) Now() time.Time { return time.Now() }
func (instant) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

type receiver struct {
	mu     sync.Mutex
	bodies []map[string]any
	answer func(n int) int // the status for the n-th request (from 1)
	hold   chan struct{}   // when set, requests wait for it to close
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-req.Context().Done():
			return
		}
	}
	b, _ := io.ReadAll(req.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	r.mu.Lock()
	r.bodies = append(r.bodies, m)
	n := len(r.bodies)
	r.mu.Unlock()
	status := 200
	if r.answer != nil {
		status = r.answer(n)
	}
	w.WriteHeader(status)
}

func serve(t *testing.T, r *receiver) string {
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEventsArriveInOrderAsSlackText(t *testing.T) {
	r := &receiver{}
	n := New(Config{URL: serve(t, r), Events: []string{Start, Ready, Done}, Clock: instant{},
		Redact: func(s string) string { return strings.ReplaceAll(s, "hunter22hunter", "***") }})
	for _, name := range []string{Start, Checkpoint, Ready, Done} { // checkpoint was not chosen
		n.Send(Event{Name: name, RunID: "mx1", Workflow: "ci", Text: "vastrun ci mx1: " + name + " token hunter22hunter"})
	}
	rep := n.Close(context.Background())
	if len(r.bodies) != 3 || len(rep.Deliveries) != 3 {
		t.Fatalf("%d bodies, %d deliveries, want 3", len(r.bodies), len(rep.Deliveries))
	}
	for i, want := range []string{Start, Ready, Done} {
		b := r.bodies[i]
		v, _ := b["vastrun"].(map[string]any)
		if v["event"] != want || v["schema"] != Schema || v["run_id"] != "mx1" {
			t.Errorf("body %d: %v, want event %s", i, b, want)
		}
		if text, _ := b["text"].(string); !strings.HasPrefix(text, "vastrun ci mx1: "+want) || strings.Contains(text, "hunter22hunter") {
			t.Errorf("body %d text %q: want it redacted", i, text)
		}
		if d := rep.Deliveries[i]; !d.Delivered || d.Attempts != 1 || d.Status != 200 || d.Event != want {
			t.Errorf("delivery %d: %+v", i, d)
		}
	}
}

func TestRetriesAreBoundedAndOnlyForTemporaryAnswers(t *testing.T) {
	r := &receiver{answer: func(n int) int {
		switch n {
		case 1, 2:
			return 503 // the first event: twice unavailable, then delivered
		case 4:
			return 400 // the second: refused, not tried again
		}
		return 200
	}}
	n := New(Config{URL: serve(t, r), Events: Events, Clock: instant{}, Tries: 3})
	n.Send(Event{Name: Start})
	n.Send(Event{Name: Ready})
	rep := n.Close(context.Background())
	if len(rep.Deliveries) != 2 {
		t.Fatalf("deliveries %+v", rep.Deliveries)
	}
	if d := rep.Deliveries[0]; !d.Delivered || d.Attempts != 3 {
		t.Errorf("the 503s: %+v, want delivered on the third try", d)
	}
	if d := rep.Deliveries[1]; d.Delivered || d.Attempts != 1 || d.Status != 400 || !strings.Contains(d.Error, "HTTP 400") {
		t.Errorf("the 400: %+v, want one try, not delivered", d)
	}
	// Never more than Tries: a receiver that is always down.
	down := &receiver{answer: func(int) int { return 500 }}
	n = New(Config{URL: serve(t, down), Events: Events, Clock: instant{}, Tries: 3})
	n.Send(Event{Name: Done})
	if d := n.Close(context.Background()).Deliveries[0]; d.Delivered || d.Attempts != 3 || len(down.bodies) != 3 {
		t.Errorf("always 500: %+v after %d requests, want 3 tries", d, len(down.bodies))
	}
}

// A receiver that never answers holds nothing up: Send drops what the
// bounded queue cannot hold, and Close gives up when its context ends,
// reporting what was not sent.
func TestAStuckReceiverNeverBlocksTheRun(t *testing.T) {
	r := &receiver{hold: make(chan struct{})}
	defer close(r.hold)
	n := New(Config{URL: serve(t, r), Events: Events, Clock: instant{}, Queue: 2, TryTimeout: time.Hour})
	for range 6 {
		n.Send(Event{Name: Checkpoint}) // one in flight (maybe), two queued, the rest dropped
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the run's flush deadline, already past
	rep := n.Close(ctx)
	if rep.Dropped < 3 || rep.Dropped+len(rep.Deliveries) != 6 {
		t.Fatalf("dropped %d, deliveries %+v: want 3 or 4 dropped and the rest reported", rep.Dropped, rep.Deliveries)
	}
	for _, d := range rep.Deliveries {
		if d.Delivered || d.Error == "" {
			t.Errorf("%+v: want undelivered, with why", d)
		}
	}
	n.Send(Event{Name: Done}) // after Close: dropped, no panic
	if n.Report().Dropped != rep.Dropped+1 {
		t.Errorf("a Send after Close was not counted as dropped")
	}
}

// A transport error is kept without the URL (a webhook URL is a secret).
func TestErrorsNeverHoldTheURL(t *testing.T) {
	url := "http://127.0.0.1:1/services/T000/B000/secretpath"
	n := New(Config{URL: url, Events: Events, Clock: instant{}, Tries: 2})
	n.Send(Event{Name: Failed})
	d := n.Close(context.Background()).Deliveries[0]
	if d.Delivered || d.Attempts != 2 || d.Error == "" || strings.Contains(d.Error, "secretpath") {
		t.Fatalf("%+v", d)
	}
}
