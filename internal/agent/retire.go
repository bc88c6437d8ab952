package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// RetireSchema names the answer of `agent retire-lost --json`.
const RetireSchema = "vastrun.agent.retire"

// RetireResult says whether a lost workload's record was set aside.
type RetireResult struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
	Retired       bool   `json:"retired"`
	// Kept says why nothing was retired ("" when Retired).
	Kept string `json:"kept,omitempty"`
}

// KeptAlive is RetireResult.Kept for a workload whose process still runs.
const KeptAlive = "the workload's process is alive"

// RetireLost sets aside the record of a workload that was killed with its
// instance (an interruptible instance stopped while outbid, then resumed),
// so that Start may run it again from the last committed checkpoint. It
// does so only when no supervisor holds the lock and the recorded process
// is gone, so it can never make room for a second live workload; a
// finished workload (exit status recorded) is kept.
func RetireLost(l Layout, now time.Time) (RetireResult, error) {
	res := RetireResult{Schema: RetireSchema, SchemaVersion: SchemaVersion}
	lf, held, err := l.lock()
	if err != nil {
		return res, fmt.Errorf("agent retire-lost: lock %s: %w", LockFile, err)
	}
	if held {
		res.Kept = "a supervisor holds the instance"
		return res, nil
	}
	defer func() { _ = lf.Close() }() // closing releases the lock; nothing was written to it
	rec, err := l.readRecord()
	switch {
	case err != nil:
		return res, err
	case rec == nil:
		res.Kept = "no workload was started"
		return res, nil
	case rec.State == "exited" && rec.ExitCode != nil:
		res.Kept = "the workload finished"
		return res, nil
	case alive(rec.PID, rec.StartTicks) && !zombie(rec.PID):
		res.Kept = KeptAlive
		return res, nil
	}
	aside := fmt.Sprintf("%s.lost-%d", l.Abs(WorkloadFile), now.UnixNano())
	if err := os.Rename(l.Abs(WorkloadFile), aside); err != nil {
		return res, fmt.Errorf("agent retire-lost: %w", err)
	}
	res.Retired = true
	return res, nil
}

// DecodeRetire reads a RetireResult, refusing another schema.
func DecodeRetire(b []byte) (RetireResult, error) {
	var r RetireResult
	if err := json.Unmarshal(b, &r); err != nil {
		return RetireResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := checkSchema(r.Schema, r.SchemaVersion, RetireSchema); err != nil {
		return RetireResult{}, err
	}
	return r, nil
}

// zombie reports a process that has exited and waits to be reaped: it is
// not running, though signal 0 still reaches it.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
