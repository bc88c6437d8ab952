package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The requests of the agent protocol. The controller sends one Request, a
// JSON document on the stdin of the fixed command `vastrun agent call`, and
// reads one answer on its stdout (proto.go). Nothing of a request is on
// the command line, and no credential is in it: storage credentials reach
// the agent in its environment only. Both ends are this package, so a
// field renamed here is renamed for both, at compile time.
const (
	// RequestSchema names every request document.
	RequestSchema = "vastrun.agent.request"
	// ErrorSchema names the answer to a call that failed or was refused.
	ErrorSchema = "vastrun.agent.error"
	// UploadSchema names the answer to an upload.
	UploadSchema = "vastrun.agent.upload"
	// CommitSchema names the answer to a commit pass.
	CommitSchema = "vastrun.agent.commit"
	// maxRequest bounds one request document: a request is small (the
	// workload's command is its largest field), so a longer one is not one.
	maxRequest = 1 << 20
)

// The operations `agent call` answers.
const (
	OpStatus     = "status"
	OpStart      = "start"
	OpRestore    = "restore"
	OpUpload     = "upload"
	OpManifest   = "manifest"
	OpCommit     = "commit"
	OpRetireLost = "retire-lost"
	// OpArm arms the instance's dead-man switch (deadman.go).
	OpArm = "arm"
	// OpSupervise is the request `agent start` hands the supervisor it
	// launches (on its stdin); `agent call` refuses it.
	OpSupervise = "supervise"
)

// Body is the typed body of one request; Op names its operation.
type Body interface{ Op() string }

// Request is the envelope of one call: the body is the Op's request type.
type Request struct {
	Schema        string          `json:"schema"`
	SchemaVersion int             `json:"schema_version"`
	Op            string          `json:"op"`
	Body          json.RawMessage `json:"body"`
}

// EncodeRequest is the request document for b.
func EncodeRequest(b Body) ([]byte, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("agent %s: encode the request: %w", b.Op(), err)
	}
	return json.Marshal(Request{Schema: RequestSchema, SchemaVersion: SchemaVersion, Op: b.Op(), Body: body})
}

// Duration is a time.Duration written as Go's duration text ("1m30s").
type Duration time.Duration

// MarshalJSON writes d as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads d from text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is text, e.g. \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// WatchSpec is the checkpoint loop's settings, shared by start (and the
// supervisor it launches), commit and `agent watch`. Paths are relative to
// the login directory.
type WatchSpec struct {
	Store string `json:"store"` // checkpoint store URI
	Dir   string `json:"dir"`   // the checkpoint directory the workload writes
	Keep  int    `json:"keep"`  // committed checkpoints kept (0: all)
	// Status is the agent's status file ("" : none).
	Status string   `json:"status,omitempty"`
	Poll   Duration `json:"poll,omitempty"` // 0: 5s
	// Quiet, when positive, also completes a step directory left untouched
	// this long without a .complete marker.
	Quiet    Duration `json:"quiet,omitempty"`
	Files    string   `json:"files,omitempty"`     // single-file checkpoints (a glob)
	Check    string   `json:"check,omitempty"`     // command that must accept a snapshot
	StepFrom string   `json:"step_from,omitempty"` // json:FIELD or regex:RE
	// Heartbeat, TTL and Deadline arm the dead-man switch.
	Heartbeat string    `json:"heartbeat,omitempty"`
	TTL       Duration  `json:"ttl,omitempty"`
	Deadline  time.Time `json:"deadline,omitzero"`
}

func (w WatchSpec) check() error {
	switch {
	case strings.TrimSpace(w.Store) == "":
		return errors.New("the checkpoint store is empty")
	case strings.TrimSpace(w.Dir) == "":
		return errors.New("the checkpoint directory is empty")
	case w.Keep < 0:
		return fmt.Errorf("keep is %d, below 0", w.Keep)
	case w.TTL < 0 || w.Quiet < 0 || w.Poll < 0:
		return errors.New("a duration is negative")
	}
	return nil
}

// StatusRequest asks for the workload's state (answer: Report).
type StatusRequest struct {
	// TouchHeartbeat touches the controller's heartbeat after reading its
	// age (controllers before the heartbeat channel).
	TouchHeartbeat bool `json:"touch_heartbeat,omitempty"`
	// LogOffset and LogMax page the workload's log; LogMax 0 returns none.
	LogOffset int64 `json:"log_offset"`
	LogMax    int64 `json:"log_max"`
	// MetricsOffset, with LogMax, returns the metrics file from here.
	MetricsOffset int64 `json:"metrics_offset"`
}

// StartRequest starts the workload under a supervisor (answer:
// StartResult); the same request, as OpSupervise, is the supervisor's.
type StartRequest struct {
	Command string    `json:"command"` // run by /bin/sh -c in the login directory
	Watch   WatchSpec `json:"watch"`
}

// SuperviseRequest is the StartRequest the supervisor receives.
type SuperviseRequest StartRequest

// RestoreRequest restores the newest committed checkpoint that verifies
// (answer: RestoreResult).
type RestoreRequest struct {
	Store string `json:"store"`
	Dir   string `json:"dir"` // replaced
	// Files also puts restored files matching this glob back in place.
	Files string `json:"files,omitempty"`
}

// UploadRequest uploads final outputs with a manifest (answer: UploadResult).
type UploadRequest struct {
	Store string `json:"store"`
	Dir   string `json:"dir"`
}

// ManifestRequest lists the files under Paths (answer: ManifestResult).
type ManifestRequest struct {
	Paths []string `json:"paths"`
}

// CommitRequest is one pass of the checkpoint loop, committing what is
// complete now (answer: CommitResult).
type CommitRequest struct {
	Watch WatchSpec `json:"watch"`
}

// RetireRequest sets aside a workload killed with its instance (answer:
// RetireResult).
type RetireRequest struct{}

// ArmRequest arms the instance's dead-man switch, or changes the armed
// one's settings (answer: ArmResult). Arming counts as a heartbeat.
type ArmRequest struct {
	// TTL: the switch fires once the controller's heartbeat is older.
	TTL Duration `json:"ttl"`
	// Bound: the switch fires this long after arming, heartbeat or not
	// (the run's own deadline; 0: none).
	Bound Duration `json:"bound,omitempty"`
	// APIURL is the marketplace the switch's destroy goes to.
	APIURL string `json:"api_url,omitempty"`
	// Run names the run in the switch's log.
	Run string `json:"run,omitempty"`
	// Refresh only beats and reports the armed switch (a vastrun command
	// touching an `up` instance); its other fields are ignored.
	Refresh bool `json:"refresh,omitempty"`
}

// Op names each request's operation.
func (StatusRequest) Op() string    { return OpStatus }
func (StartRequest) Op() string     { return OpStart }
func (SuperviseRequest) Op() string { return OpSupervise }
func (RestoreRequest) Op() string   { return OpRestore }
func (UploadRequest) Op() string    { return OpUpload }
func (ManifestRequest) Op() string  { return OpManifest }
func (CommitRequest) Op() string    { return OpCommit }
func (RetireRequest) Op() string    { return OpRetireLost }
func (ArmRequest) Op() string       { return OpArm }

func (r ArmRequest) check() error {
	switch {
	case r.Refresh:
		return nil
	case r.TTL <= 0:
		return errors.New("the TTL must be positive")
	case r.Bound < 0:
		return errors.New("the bound is negative")
	case strings.TrimSpace(r.APIURL) == "":
		return errors.New("the API URL is empty: the switch would have nowhere to destroy its instance")
	}
	return nil
}

func (r StatusRequest) check() error {
	if r.LogOffset < 0 || r.LogMax < 0 || r.MetricsOffset < 0 {
		return errors.New("an offset or the log size is negative")
	}
	return nil
}

func (r StartRequest) check() error {
	if strings.TrimSpace(r.Command) == "" {
		return errors.New("the command is empty")
	}
	return r.Watch.check()
}

func (r SuperviseRequest) check() error { return StartRequest(r).check() }

func (r RestoreRequest) check() error {
	if strings.TrimSpace(r.Store) == "" || strings.TrimSpace(r.Dir) == "" {
		return errors.New("the store and the directory are both needed")
	}
	return nil
}

func (r UploadRequest) check() error { return RestoreRequest{Store: r.Store, Dir: r.Dir}.check() }

func (r ManifestRequest) check() error {
	if len(r.Paths) == 0 {
		return errors.New("no paths")
	}
	return nil
}

// UploadResult is the answer to an upload.
type UploadResult struct {
	Schema         string `json:"schema"`
	SchemaVersion  int    `json:"schema_version"`
	ManifestSHA256 string `json:"manifest_sha256"`
	Files          int    `json:"files"`
}

// CommitResult is the answer to a commit pass; what it committed is in
// the agent's status (a status request reads it).
type CommitResult struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
}

// Error codes of an ErrorAnswer.
const (
	// CodeUnsupported: another schema or version, or an unknown op. The
	// two ends are not the same vastrun.
	CodeUnsupported = "unsupported"
	// CodeInvalid: the request is malformed or incomplete.
	CodeInvalid = "invalid"
	// CodeFailed: the request was understood and its work failed.
	CodeFailed = "failed"
)

// ErrorAnswer is what `agent call` prints when a call fails or is refused
// (and it exits non-zero).
type ErrorAnswer struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
	Op            string `json:"op"`
	Code          string `json:"code"`
	Message       string `json:"message"`
}

// ErrRequest means the agent refused a request as malformed (CodeInvalid).
var ErrRequest = errors.New("agent protocol: invalid request")

// ErrCallFailed means the agent understood a request and its work failed.
var ErrCallFailed = errors.New("agent call failed")

// RemoteError is an ErrorAnswer as an error. It matches ErrSchema
// (unsupported), ErrRequest (invalid) or ErrCallFailed (failed).
type RemoteError struct {
	Op, Code, Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("the agent answered %s: %s", e.Code, e.Message)
}

// Is classifies the error by its code.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case CodeUnsupported:
		return target == ErrSchema
	case CodeInvalid:
		return target == ErrRequest
	}
	return target == ErrCallFailed
}

// DecodeErrorAnswer parses and checks an error answer.
func DecodeErrorAnswer(b []byte) (*RemoteError, error) {
	var a ErrorAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := checkSchema(a.Schema, a.SchemaVersion, ErrorSchema); err != nil {
		return nil, err
	}
	switch a.Code {
	case CodeUnsupported, CodeInvalid, CodeFailed:
	default:
		return nil, fmt.Errorf("%w: unknown error code %q", ErrSchema, a.Code)
	}
	return &RemoteError{Op: a.Op, Code: a.Code, Message: a.Message}, nil
}

// DecodeUpload parses and checks an upload answer.
func DecodeUpload(b []byte) (UploadResult, error) {
	var r UploadResult
	if err := json.Unmarshal(b, &r); err != nil {
		return UploadResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := checkSchema(r.Schema, r.SchemaVersion, UploadSchema); err != nil {
		return UploadResult{}, err
	}
	if r.ManifestSHA256 == "" {
		return UploadResult{}, fmt.Errorf("%w: upload answer without a manifest digest", ErrSchema)
	}
	return r, nil
}

// DecodeCommit parses and checks a commit answer.
func DecodeCommit(b []byte) (CommitResult, error) {
	var r CommitResult
	if err := json.Unmarshal(b, &r); err != nil {
		return CommitResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return r, checkSchema(r.Schema, r.SchemaVersion, CommitSchema)
}

// decodeRequest reads the envelope; a request this agent does not speak
// is a *RemoteError to answer with.
func decodeRequest(b []byte) (Request, *RemoteError) {
	var req Request
	if err := json.Unmarshal(b, &req); err != nil {
		return req, &RemoteError{Code: CodeInvalid, Message: "the request is not a JSON document: " + err.Error()}
	}
	if req.Schema != RequestSchema || req.SchemaVersion != SchemaVersion {
		return req, &RemoteError{Op: req.Op, Code: CodeUnsupported,
			Message: fmt.Sprintf("%s version %d (this vastrun speaks %s version %d)", orNone(req.Schema), req.SchemaVersion, RequestSchema, SchemaVersion)}
	}
	return req, nil
}

// decodeBody reads a request's body strictly: a field this agent does not
// know means the two ends differ, and is refused rather than ignored.
func decodeBody(req Request, into any) *RemoteError {
	if len(req.Body) == 0 {
		return &RemoteError{Op: req.Op, Code: CodeInvalid, Message: "the request has no body"}
	}
	d := json.NewDecoder(bytes.NewReader(req.Body))
	d.DisallowUnknownFields()
	if err := d.Decode(into); err != nil {
		return &RemoteError{Op: req.Op, Code: CodeInvalid, Message: "the " + req.Op + " request: " + err.Error()}
	}
	if c, ok := into.(interface{ check() error }); ok {
		if err := c.check(); err != nil {
			return &RemoteError{Op: req.Op, Code: CodeInvalid, Message: "the " + req.Op + " request: " + err.Error()}
		}
	}
	return nil
}
