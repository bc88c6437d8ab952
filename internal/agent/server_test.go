package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/storage"
)

// testHost is a Host in a fresh login directory, with a file store.
func testHost(t *testing.T) (*Host, string) {
	t.Helper()
	h := &Host{Layout: Layout{Home: t.TempDir()}, Getenv: func(string) string { return "" },
		Clock: clock.NewFake(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)), Log: &bytes.Buffer{}}
	return h, "file://" + t.TempDir()
}

func mustEncode(t *testing.T, b Body) []byte {
	t.Helper()
	doc, err := EncodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// serve runs one `agent call` and returns its stdout and error.
func serve(t *testing.T, h *Host, doc []byte) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	err := h.Serve(context.Background(), bytes.NewReader(doc), &out)
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 1 {
		t.Fatalf("answer is %d lines, want 1: %q", n, out.String())
	}
	return out.Bytes(), err
}

// Every op the controller uses: a typed request in, its typed answer out,
// the work done in the login directory and the store.
func TestServeAnswersEachOp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, h *Host, store string) Body
		check func(t *testing.T, h *Host, store string, ans []byte)
	}{
		{name: "status", setup: func(t *testing.T, h *Host, _ string) Body {
			os.MkdirAll(h.Layout.Abs(StateDir), 0o755)
			os.WriteFile(h.Layout.Abs(LogFile), []byte("hello log"), 0o644)
			return StatusRequest{LogOffset: 6, LogMax: 100}
		}, check: func(t *testing.T, h *Host, _ string, ans []byte) {
			r, err := DecodeReport(ans)
			if err != nil || r.Workload.State != WorkloadAbsent || string(r.Log.Data) != "log" || r.Log.Offset != 6 || r.Home != h.Layout.Home {
				t.Fatalf("%+v %v", r, err)
			}
		}},
		{name: "manifest", setup: func(t *testing.T, h *Host, _ string) Body {
			os.MkdirAll(h.Layout.Abs("data"), 0o755)
			os.WriteFile(h.Layout.Abs("data/a.txt"), []byte("abc"), 0o644)
			return ManifestRequest{Paths: []string{"data"}}
		}, check: func(t *testing.T, _ *Host, _ string, ans []byte) {
			m, err := DecodeManifest(ans)
			if err != nil || len(m.Files) != 1 || m.Files["data/a.txt"].Size != 3 {
				t.Fatalf("%+v %v", m, err)
			}
		}},
		{name: "restore, nothing committed", setup: func(t *testing.T, _ *Host, store string) Body {
			return RestoreRequest{Store: store, Dir: ResumeDir}
		}, check: func(t *testing.T, _ *Host, _ string, ans []byte) {
			r, err := DecodeRestore(ans)
			if err != nil || r.Step != -1 {
				t.Fatalf("%+v %v", r, err)
			}
		}},
		{name: "commit then restore", setup: func(t *testing.T, h *Host, store string) Body {
			writeStep(t, h.Layout.Abs("ck"), "100", true)
			writeStep(t, h.Layout.Abs("ck"), "200", false)
			return CommitRequest{Watch: WatchSpec{Store: store, Dir: "ck", Keep: 2, Status: StatusFile}}
		}, check: func(t *testing.T, h *Host, store string, ans []byte) {
			if _, err := DecodeCommit(ans); err != nil {
				t.Fatal(err)
			}
			out, err := serve(t, h, mustEncode(t, RestoreRequest{Store: store, Dir: ResumeDir}))
			r, derr := DecodeRestore(out)
			if err != nil || derr != nil || r.Step != 100 {
				t.Fatalf("restore after the commit: %+v %v %v", r, err, derr)
			}
			if b, err := os.ReadFile(h.Layout.Abs(filepath.Join(ResumeDir, "state.json"))); err != nil || string(b) != `{"step":100}` {
				t.Fatalf("restored file: %q %v", b, err)
			}
		}},
		{name: "upload", setup: func(t *testing.T, h *Host, _ string) Body {
			os.MkdirAll(h.Layout.Abs("out"), 0o755)
			os.WriteFile(h.Layout.Abs("out/model.bin"), []byte("weights"), 0o644)
			os.WriteFile(h.Layout.Abs("out/eval.json"), []byte("{}"), 0o644)
			return UploadRequest{Store: "", Dir: "out"} // the store is filled in below
		}, check: func(t *testing.T, _ *Host, store string, ans []byte) {
			u, err := DecodeUpload(ans)
			if err != nil || u.Files != 2 || len(u.ManifestSHA256) != 64 {
				t.Fatalf("%+v %v", u, err)
			}
			s, err := storage.Open(store, storage.Options{})
			if err != nil {
				t.Fatal(err)
			}
			list, err := (checkpoint.Store{S: s, Prefix: "outputs"}).Committed(context.Background())
			if err != nil || len(list) != 1 || list[0].ManifestSHA256 != u.ManifestSHA256 {
				t.Fatalf("the store holds %+v %v", list, err)
			}
		}},
		{name: "retire-lost, nothing started", setup: func(*testing.T, *Host, string) Body { return RetireRequest{} },
			check: func(t *testing.T, _ *Host, _ string, ans []byte) {
				r, err := DecodeRetire(ans)
				if err != nil || r.Retired || r.Kept != "no workload was started" {
					t.Fatalf("%+v %v", r, err)
				}
			}},
		{name: "start, a workload ran before", setup: func(t *testing.T, h *Host, store string) Body {
			os.MkdirAll(h.Layout.Abs(StateDir), 0o755)
			code := 0
			h.Layout.writeRecord(record{State: "exited", ExitCode: &code})
			h.Executable = "/nonexistent/vastrun"
			return StartRequest{Command: "true", Watch: WatchSpec{Store: store, Dir: "ck"}}
		}, check: func(t *testing.T, _ *Host, _ string, ans []byte) {
			r, err := DecodeStart(ans)
			if err != nil || r.Started || !strings.Contains(r.Refused, "already started") {
				t.Fatalf("%+v %v", r, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, store := testHost(t)
			body := tc.setup(t, h, store)
			if u, ok := body.(UploadRequest); ok {
				u.Store = store
				body = u
			}
			ans, err := serve(t, h, mustEncode(t, body))
			if err != nil {
				t.Fatalf("%s: %v (answer %s)", tc.name, err, ans)
			}
			tc.check(t, h, store, ans)
		})
	}
}

// A request this agent does not speak, or one it cannot act on, is
// answered with a typed error answer (and an error, so the command exits
// non-zero); the code says which.
func TestServeRefuses(t *testing.T) {
	h, store := testHost(t)
	envelope := func(schema string, version int, op, body string) []byte {
		m := map[string]any{"schema": schema, "schema_version": version, "op": op}
		if body != "" {
			m["body"] = json.RawMessage(body)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name, code, msg string
		doc             []byte
	}{
		{"not JSON", CodeInvalid, "not a JSON document", []byte("status --json")},
		{"another version", CodeUnsupported, "version 2", envelope(RequestSchema, 2, OpStatus, `{}`)},
		{"another schema", CodeUnsupported, "vastrun.other", envelope("vastrun.other", 1, OpStatus, `{}`)},
		{"unknown op", CodeUnsupported, `unknown op "reboot"`, envelope(RequestSchema, 1, "reboot", `{}`)},
		{"supervise is not a call", CodeUnsupported, `unknown op "supervise"`, mustEncode(t, SuperviseRequest{Command: "x", Watch: WatchSpec{Store: store, Dir: "ck"}})},
		{"no body", CodeInvalid, "no body", envelope(RequestSchema, 1, OpStatus, ``)},
		{"a renamed field", CodeInvalid, `unknown field "logoffset"`, envelope(RequestSchema, 1, OpStatus, `{"logoffset":5}`)},
		{"a field of the wrong type", CodeInvalid, "the status request", envelope(RequestSchema, 1, OpStatus, `{"log_offset":"5"}`)},
		{"start without a command", CodeInvalid, "the command is empty", mustEncode(t, StartRequest{Watch: WatchSpec{Store: store, Dir: "ck"}})},
		{"start without a store", CodeInvalid, "store is empty", mustEncode(t, StartRequest{Command: "true", Watch: WatchSpec{Dir: "ck"}})},
		{"manifest without paths", CodeInvalid, "no paths", mustEncode(t, ManifestRequest{})},
		{"a bad duration", CodeInvalid, "duration", envelope(RequestSchema, 1, OpCommit, `{"watch":{"store":"file:///x","dir":"ck","keep":1,"ttl":"soon"}}`)},
		{"the work fails", CodeFailed, "", mustEncode(t, RestoreRequest{Store: "ftp://nowhere/x", Dir: ResumeDir})},
		{"an upload of nothing", CodeFailed, "", mustEncode(t, UploadRequest{Store: store, Dir: "no-such-dir"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := serve(t, h, tc.doc)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != tc.code || !strings.Contains(re.Message, tc.msg) {
				t.Fatalf("error %v, want code %s with %q", err, tc.code, tc.msg)
			}
			a, derr := DecodeErrorAnswer(out)
			if derr != nil || a.Code != tc.code || a.Message != re.Message {
				t.Fatalf("answer %s: %+v %v", out, a, derr)
			}
			want := map[string]error{CodeUnsupported: ErrSchema, CodeInvalid: ErrRequest, CodeFailed: ErrCallFailed}[tc.code]
			if !errors.Is(err, want) {
				t.Fatalf("%v is not %v", err, want)
			}
		})
	}
}

// The request start hands the supervisor is the start request itself,
// and the supervisor takes nothing else.
func TestDecodeSupervise(t *testing.T) {
	want := SuperviseRequest{Command: "python train.py", Watch: WatchSpec{Store: "s3://b/ck", Dir: "ck", Keep: 2, TTL: Duration(90 * time.Second),
		Poll: Duration(time.Second), Deadline: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), StepFrom: "json:step"}}
	got, err := DecodeSupervise(bytes.NewReader(mustEncode(t, want)))
	if err != nil || got != want {
		t.Fatalf("got %+v %v, want %+v", got, err, want)
	}
	for name, doc := range map[string][]byte{
		"a start request": mustEncode(t, StartRequest(want)),
		"no command":      mustEncode(t, SuperviseRequest{Watch: want.Watch}),
		"empty":           nil,
	} {
		if _, err := DecodeSupervise(bytes.NewReader(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
