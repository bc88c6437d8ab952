// Package notify sends a run's events to a webhook: Slack-compatible JSON
// ("text" is what Slack shows; "vastrun" carries the event for other
// receivers), one POST an event, in the order they happened.
//
// Contracts:
//   - Never blocking: Send only queues. The queue is bounded; an event
//     that finds it full is dropped and counted, never waited for.
//   - Never failing: a delivery that fails is recorded (Report), not
//     returned; nothing here can fail the run.
//   - Bounded: each POST has its own deadline, a failed one (transport,
//     429, 5xx) is tried again a bounded number of times, and Close waits
//     for the queue only until its context's deadline.
//   - In order: one sender delivers the queue first in, first out.
//   - The payload passes through Redact before it leaves, and so do the
//     errors the report keeps; the URL itself is a secret the caller masks.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// The events a run can send (notify.events in the config).
const (
	Start              = "start"               // the run rents its first instance, after the approval
	Ready              = "ready"               // an instance is running
	Outbid             = "outbid"              // an interruptible instance was outbid
	Checkpoint         = "checkpoint"          // a checkpoint was committed
	Done               = "done"                // the run passed
	Failed             = "failed"              // the run ended otherwise
	CleanupUnconfirmed = "cleanup_unconfirmed" // an instance could not be confirmed destroyed
)

// Events are every event, in the order a run meets them.
var Events = []string{Start, Ready, Outbid, Checkpoint, Done, Failed, CleanupUnconfirmed}

// DefaultEvents are sent when the config names none: all but checkpoint,
// which a long training run sends often.
var DefaultEvents = []string{Start, Ready, Outbid, Done, Failed, CleanupUnconfirmed}

// Schema names the "vastrun" object of every payload.
const Schema = "vastrun.notify/v1"

// Event is one thing that happened to the run.
type Event struct {
	Name       string    `json:"event"`
	RunID      string    `json:"run_id"`
	Workflow   string    `json:"workflow"`
	Label      string    `json:"label,omitempty"`
	InstanceID int64     `json:"instance_id,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	Step       *int64    `json:"step,omitempty"` // checkpoint
	At         time.Time `json:"at"`
	Simulated  bool      `json:"simulated"`
	CIRun      string    `json:"ci_run,omitempty"`
	// Text is the line a person reads (Slack's "text").
	Text string `json:"-"`
}

// payload is what is POSTed: Slack reads text, other receivers vastrun.
type payload struct {
	Text    string   `json:"text"`
	Vastrun envelope `json:"vastrun"`
}

// envelope is the event with its schema.
type envelope struct {
	Schema string `json:"schema"`
	Event
}

// Delivery is what became of one event.
type Delivery struct {
	Event     string    `json:"event"`
	At        time.Time `json:"at"`
	Delivered bool      `json:"delivered"`
	Attempts  int       `json:"attempts"`
	Status    int       `json:"status,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// Report is what the notifications did, for the receipt.
type Report struct {
	Deliveries []Delivery
	Dropped    int // events that found the queue full
}

// Config sets a Notifier up.
type Config struct {
	URL    string
	Events []string // the events to send (DefaultEvents when empty)
	HTTP   *http.Client
	// Clock paces the waits between tries (the wall clock: the receiver
	// is real even when the marketplace is simulated).
	Clock  clock.Clock
	Redact func(string) string
	// Queue bounds the events waiting to be sent (default 64).
	Queue int
	// Tries bounds the POSTs of one event (default 3); TryTimeout bounds
	// each (default 5 s); Backoff is the first wait between tries, doubled
	// after each (default 1 s).
	Tries      int
	TryTimeout time.Duration
	Backoff    time.Duration
}

// Notifier delivers events in the background.
type Notifier struct {
	cfg    Config
	want   map[string]bool
	queue  chan Event
	done   chan struct{}
	ctx    context.Context // cancelled when Close gives up waiting
	cancel context.CancelFunc

	mu         sync.Mutex
	closed     bool
	deliveries []Delivery
	dropped    int
}

// New starts a Notifier; Close stops it.
func New(cfg Config) *Notifier {
	if cfg.HTTP == nil {
		cfg.HTTP = http.DefaultClient
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Redact == nil {
		cfg.Redact = func(s string) string { return s }
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 64
	}
	if cfg.Tries <= 0 {
		cfg.Tries = 3
	}
	if cfg.TryTimeout <= 0 {
		cfg.TryTimeout = 5 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	events := cfg.Events
	if len(events) == 0 {
		events = DefaultEvents
	}
	n := &Notifier{cfg: cfg, want: map[string]bool{}, queue: make(chan Event, cfg.Queue), done: make(chan struct{})}
	for _, e := range events {
		n.want[e] = true
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.run()
	return n
}

// Wants reports whether the events chosen include name.
func (n *Notifier) Wants(name string) bool { return n != nil && n.want[name] }

// Send queues ev when its event was chosen. It never waits: when the
// queue is full (the receiver is slow or down), ev is dropped and counted.
func (n *Notifier) Send(ev Event) {
	if !n.Wants(ev.Name) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		n.dropped++
		return
	}
	select {
	case n.queue <- ev:
	default:
		n.dropped++
	}
}

// Close stops taking events and waits for the queued ones until ctx ends;
// what was not sent by then is reported undelivered. It returns the report.
func (n *Notifier) Close(ctx context.Context) Report {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.queue)
	}
	n.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
		n.cancel() // the POST in flight ends; the sender records the rest
		<-n.done
	}
	return n.Report()
}

// Report is what the notifications did so far.
func (n *Notifier) Report() Report {
	n.mu.Lock()
	defer n.mu.Unlock()
	return Report{Deliveries: append([]Delivery(nil), n.deliveries...), Dropped: n.dropped}
}

func (n *Notifier) run() {
	defer close(n.done)
	for ev := range n.queue {
		d := Delivery{Event: ev.Name, At: ev.At}
		if n.ctx.Err() != nil {
			d.Error = "not sent: the run ended before the queue emptied"
		} else {
			n.deliver(ev, &d)
		}
		n.mu.Lock()
		n.deliveries = append(n.deliveries, d)
		n.mu.Unlock()
	}
}

// deliver POSTs ev, trying again after a transport error, a 429 or a 5xx.
func (n *Notifier) deliver(ev Event, d *Delivery) {
	body, err := json.Marshal(payload{Text: ev.Text, Vastrun: envelope{Schema: Schema, Event: ev}})
	if err != nil {
		d.Error = err.Error()
		return
	}
	body = []byte(n.cfg.Redact(string(body)))
	wait := n.cfg.Backoff
	for d.Attempts < n.cfg.Tries {
		if d.Attempts > 0 {
			if clock.Sleep(n.ctx, n.cfg.Clock, wait) != nil {
				return
			}
			wait *= 2
		}
		d.Attempts++
		status, err := n.post(body)
		d.Status = status
		switch {
		case err == nil && status < 300:
			d.Delivered, d.Error = true, ""
			return
		case err != nil:
			d.Error = n.cfg.Redact(err.Error())
		default:
			d.Error = fmt.Sprintf("the webhook answered HTTP %d", status)
			if status != http.StatusTooManyRequests && status < 500 {
				return // the receiver refuses it: another try would too
			}
		}
	}
}

func (n *Notifier) post(body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.TryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := n.cfg.HTTP.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the cause, without the URL (a secret)
		}
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16)) //nolint:errcheck // drained for reuse; the status is the answer
	res.Body.Close()                                     //nolint:errcheck // read-only body
	return res.StatusCode, nil
}
