package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// The heartbeat channel: the controller keeps one SSH session per
// connection running `vastrun agent heartbeat --serve` and writes one
// request a line on its stdin; the agent touches the heartbeat file and
// answers one line on stdout. A beat therefore costs a line each way on a
// session that is already open, not a new process on the instance (the
// status poll, which did the touching before, started one per pass).
//
// Both ends check the schema: a request the agent does not understand is
// answered with ok=false and the session ends; an answer the controller
// does not understand is ErrSchema.
const (
	// HeartbeatSchema names heartbeat requests and answers.
	HeartbeatSchema = "vastrun.agent.heartbeat"
	// maxHeartbeatLine bounds one request line: a request is tiny, so a
	// longer line is not one.
	maxHeartbeatLine = 4 << 10
)

// HeartbeatRequest is one beat, written by the controller.
type HeartbeatRequest struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
	Seq           uint64 `json:"seq"`
}

// HeartbeatAnswer is the agent's answer to one beat.
type HeartbeatAnswer struct {
	Schema        string    `json:"schema"`
	SchemaVersion int       `json:"schema_version"`
	Seq           uint64    `json:"seq"`
	OK            bool      `json:"ok"` // the heartbeat file was touched
	Time          time.Time `json:"time"`
	// PreviousAgeSeconds is the heartbeat's age before this beat touched
	// it; nil when there was none yet.
	PreviousAgeSeconds *float64 `json:"previous_age_seconds"`
	// Errors are the agent's problems with this beat (a failed touch, a
	// refused request).
	Errors []string `json:"errors"`
}

// NewHeartbeatRequest is the request for beat seq.
func NewHeartbeatRequest(seq uint64) HeartbeatRequest {
	return HeartbeatRequest{Schema: HeartbeatSchema, SchemaVersion: SchemaVersion, Seq: seq}
}

// DecodeHeartbeatAnswer parses and checks one answer line for beat seq.
func DecodeHeartbeatAnswer(b []byte, seq uint64) (HeartbeatAnswer, error) {
	a, err := decodeHeartbeatAnswer(b)
	if err != nil {
		return HeartbeatAnswer{}, err
	}
	if a.Seq != seq {
		return HeartbeatAnswer{}, fmt.Errorf("%w: heartbeat answer %d for request %d", ErrSchema, a.Seq, seq)
	}
	return a, nil
}

func decodeHeartbeatAnswer(b []byte) (HeartbeatAnswer, error) {
	var a HeartbeatAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return HeartbeatAnswer{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return a, checkSchema(a.Schema, a.SchemaVersion, HeartbeatSchema)
}

// ErrHeartbeatRefused means a heartbeat request was not one this agent
// understands; the serve loop answered so and ended.
var ErrHeartbeatRefused = errors.New("heartbeat request refused")

// ServeHeartbeat answers heartbeat requests read from r, one JSON line
// each, touching the heartbeat file for every accepted one, until r ends
// (the controller closed the session, or its connection dropped: nil).
// A request it does not understand is answered with ok=false and ends the
// loop with ErrHeartbeatRefused.
func ServeHeartbeat(l Layout, r io.Reader, w io.Writer, clk clock.Clock) error {
	if clk == nil {
		clk = clock.Real{}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxHeartbeatLine)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		a, refused := Beat(l, sc.Bytes(), clk.Now())
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("answer heartbeat %d: %w", a.Seq, err)
		}
		if refused != nil {
			return refused
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			refused := fmt.Errorf("%w: line longer than %d bytes", ErrHeartbeatRefused, maxHeartbeatLine)
			if err := enc.Encode(refuse(0, clk.Now(), fmt.Sprintf("a request line is longer than %d bytes", maxHeartbeatLine))); err != nil {
				return errors.Join(refused, fmt.Errorf("answer the refusal: %w", err))
			}
			return refused
		}
		return fmt.Errorf("read heartbeat requests: %w", err)
	}
	return nil
}

// Beat answers one request line at now: it touches the heartbeat when the
// request is one this agent speaks; refused is set when it is not.
func Beat(l Layout, line []byte, now time.Time) (a HeartbeatAnswer, refused error) {
	var req HeartbeatRequest
	if err := json.Unmarshal(line, &req); err != nil {
		msg := "the request is not JSON: " + err.Error()
		return refuse(0, now, msg), fmt.Errorf("%w: %s", ErrHeartbeatRefused, msg)
	}
	if err := checkSchema(req.Schema, req.SchemaVersion, HeartbeatSchema); err != nil {
		return refuse(req.Seq, now, err.Error()), fmt.Errorf("%w: %w", ErrHeartbeatRefused, err)
	}
	a = HeartbeatAnswer{Schema: HeartbeatSchema, SchemaVersion: SchemaVersion, Seq: req.Seq, Time: now.UTC(), Errors: []string{}}
	age, err := touchHeartbeat(l, now)
	a.PreviousAgeSeconds = age
	if err != nil {
		a.Errors = append(a.Errors, err.Error())
	} else {
		a.OK = true
	}
	return a, nil
}

func refuse(seq uint64, now time.Time, msg string) HeartbeatAnswer {
	return HeartbeatAnswer{Schema: HeartbeatSchema, SchemaVersion: SchemaVersion, Seq: seq, Time: now.UTC(), Errors: []string{"refused: " + msg}}
}

// heartbeatAge is the heartbeat's age at now; nil when there is none.
func heartbeatAge(l Layout, now time.Time) *float64 {
	fi, err := os.Stat(l.Abs(Heartbeat))
	if err != nil {
		return nil
	}
	age := now.Sub(fi.ModTime()).Seconds()
	return &age
}

// touchHeartbeat sets the heartbeat's time to now and returns its age
// before. The dead-man switch (Watch) reads that time.
func touchHeartbeat(l Layout, now time.Time) (*float64, error) {
	age := heartbeatAge(l, now)
	hb := l.Abs(Heartbeat)
	if age == nil {
		if err := os.MkdirAll(l.Abs(StateDir), 0o755); err != nil {
			return nil, fmt.Errorf("touch the heartbeat: %w", err)
		}
		f, err := os.OpenFile(hb, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("touch the heartbeat: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("touch the heartbeat: %w", err)
		}
	}
	if err := os.Chtimes(hb, now, now); err != nil {
		return age, fmt.Errorf("touch the heartbeat: %w", err)
	}
	return age, nil
}
