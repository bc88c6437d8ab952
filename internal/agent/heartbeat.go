package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// HeartbeatSchema names the document `agent heartbeat --json` prints.
const HeartbeatSchema = "vastrun.agent.heartbeat"

// HeartbeatReply is the answer to `vastrun agent heartbeat --json`: the
// controller's heartbeat is touched by a call of its own, on its own
// schedule, never as a side effect of asking for the status — so a status
// that cannot be built or read does not starve the dead-man switch, and a
// heartbeat that cannot be written is seen as such.
type HeartbeatReply struct {
	Schema        string    `json:"schema"`
	SchemaVersion int       `json:"schema_version"`
	Time          time.Time `json:"time"`
	// PreviousAgeSeconds is the heartbeat's age before this touch; nil
	// when there was none yet.
	PreviousAgeSeconds *float64 `json:"previous_age_seconds"`
	// Error says why the heartbeat could not be written ("" when it was).
	Error string `json:"error,omitempty"`
}

// Beat touches the heartbeat file of l at now.
func Beat(l Layout, now time.Time) HeartbeatReply {
	r := HeartbeatReply{Schema: HeartbeatSchema, SchemaVersion: SchemaVersion, Time: now.UTC()}
	hb := l.Abs(Heartbeat)
	if fi, err := os.Stat(hb); err == nil {
		age := now.Sub(fi.ModTime()).Seconds()
		r.PreviousAgeSeconds = &age
	}
	f, err := os.OpenFile(hb, os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Chtimes(hb, now, now)
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// DecodeHeartbeat parses and checks an `agent heartbeat --json` answer; a
// heartbeat the agent could not write is an error.
func DecodeHeartbeat(b []byte) (HeartbeatReply, error) {
	var r HeartbeatReply
	if err := json.Unmarshal(b, &r); err != nil {
		return HeartbeatReply{}, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	if err := checkSchema(r.Schema, r.SchemaVersion, HeartbeatSchema); err != nil {
		return HeartbeatReply{}, err
	}
	if r.Error != "" {
		return r, fmt.Errorf("the agent could not write the heartbeat: %s", r.Error)
	}
	return r, nil
}
