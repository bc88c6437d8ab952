package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/remote"
)

// fakeRunner answers each command with run's stdout, stderr and error,
// and keeps the commands.
type fakeRunner struct {
	run func(cmd remote.Command) (stdout, stderr string, err error)
	got []remote.Command
}

func (f *fakeRunner) Run(_ context.Context, cmd remote.Command) error {
	f.got = append(f.got, cmd)
	out, errOut, err := f.run(cmd)
	if cmd.Stdout != nil {
		io.WriteString(cmd.Stdout, out)
	}
	if cmd.Stderr != nil {
		io.WriteString(cmd.Stderr, errOut)
	}
	return err
}

// hostRunner runs every command as `agent call` on h, in process.
func hostRunner(h *Host) *fakeRunner {
	return &fakeRunner{run: func(cmd remote.Command) (string, string, error) {
		var out bytes.Buffer
		if err := h.Serve(context.Background(), bytes.NewReader(cmd.Stdin), &out); err != nil {
			return out.String(), err.Error(), &remote.ExitError{Code: 1}
		}
		return out.String(), "", nil
	}}
}

var _ Runner = (*remote.Client)(nil)
var _ Streamer = (*remote.Client)(nil)

// The client's requests reach the handlers and their answers come back
// typed; every call is the one fixed command, its request on stdin only,
// and the environment is handed over as given.
func TestClientRoundTrip(t *testing.T) {
	h, store := testHost(t)
	f := hostRunner(h)
	c := &Client{R: f, Bin: ".vastrun/bin/vastrun", Instance: "instance 7"}
	ctx := context.Background()
	writeStep(t, h.Layout.Abs("ck"), "100", true)
	env := map[string]string{"AWS_SECRET_ACCESS_KEY": "k"}
	if _, err := c.Commit(ctx, CommitRequest{Watch: WatchSpec{Store: store, Dir: "ck", Keep: 1, Status: StatusFile}}, env); err != nil {
		t.Fatal(err)
	}
	rs, err := c.Restore(ctx, RestoreRequest{Store: store, Dir: ResumeDir}, env)
	if err != nil || rs.Step != 100 {
		t.Fatalf("restore: %+v %v", rs, err)
	}
	st, err := c.Status(ctx, StatusRequest{LogMax: 10})
	if err != nil || st.Resume == nil || st.Resume.RestoredStep != 100 {
		t.Fatalf("status: %+v %v", st, err)
	}
	if r, err := c.RetireLost(ctx); err != nil || r.Retired {
		t.Fatalf("retire: %+v %v", r, err)
	}
	ops := []string{OpCommit, OpRestore, OpStatus, OpRetireLost}
	if len(f.got) != len(ops) {
		t.Fatalf("%d commands, want %d", len(f.got), len(ops))
	}
	for i, cmd := range f.got {
		if cmd.Script != ".vastrun/bin/vastrun agent call" {
			t.Errorf("command %d is %q", i, cmd.Script)
		}
		var req Request
		if err := json.Unmarshal(cmd.Stdin, &req); err != nil || req.Op != ops[i] || req.Schema != RequestSchema {
			t.Errorf("stdin of command %d: %s %v", i, cmd.Stdin, err)
		}
		if wantEnv := i < 2; (cmd.Env != nil) != wantEnv || strings.Contains(string(cmd.Stdin), "AWS_") {
			t.Errorf("command %d: env %v, stdin %s", i, cmd.Env, cmd.Stdin)
		}
	}
	// A request the agent refuses comes back as its typed error.
	_, err = c.Start(ctx, StartRequest{Watch: WatchSpec{Store: store, Dir: "ck"}}, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeInvalid || !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), "agent start on instance 7") {
		t.Fatalf("start without a command: %v", err)
	}
}

// Whatever goes wrong, the error names the op and the instance and is
// classified: an answer that does not decode or speaks another version is
// ErrSchema, a failed command keeps its exit status and (redacted) stderr,
// and the agent's error answer is a *RemoteError.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	calls := []struct {
		op   string
		good any // a valid answer
		call func(c *Client) error
	}{
		{OpStatus, Report{Schema: StatusSchema, SchemaVersion: 1, Workload: Workload{State: WorkloadAbsent}},
			func(c *Client) error { _, err := c.Status(ctx, StatusRequest{}); return err }},
		{OpStart, StartResult{Schema: StartSchema, SchemaVersion: 1, Started: true},
			func(c *Client) error { _, err := c.Start(ctx, StartRequest{Command: "x"}, nil); return err }},
		{OpRestore, RestoreResult{Schema: RestoreSchema, SchemaVersion: 1, Step: -1},
			func(c *Client) error { _, err := c.Restore(ctx, RestoreRequest{}, nil); return err }},
		{OpUpload, UploadResult{Schema: UploadSchema, SchemaVersion: 1, ManifestSHA256: strings.Repeat("a", 64)},
			func(c *Client) error { _, err := c.Upload(ctx, UploadRequest{}, nil); return err }},
		{OpManifest, ManifestResult{Schema: ManifestSchema, SchemaVersion: 1},
			func(c *Client) error { _, err := c.Manifest(ctx, ManifestRequest{}); return err }},
		{OpCommit, CommitResult{Schema: CommitSchema, SchemaVersion: 1},
			func(c *Client) error { _, err := c.Commit(ctx, CommitRequest{}, nil); return err }},
		{OpRetireLost, RetireResult{Schema: RetireSchema, SchemaVersion: 1},
			func(c *Client) error { _, err := c.RetireLost(ctx); return err }},
	}
	errAnswer := func(code string) string {
		b, _ := json.Marshal(ErrorAnswer{Schema: ErrorSchema, SchemaVersion: 1, Code: code, Message: "it went wrong with hunter2"})
		return string(b) + "\n"
	}
	for _, call := range calls {
		good, _ := json.Marshal(call.good)
		other := map[string]any{}
		json.Unmarshal(good, &other)
		other["schema_version"] = 2
		otherVersion, _ := json.Marshal(other)
		for _, tc := range []struct {
			name           string
			stdout, stderr string
			err            error
			is             error  // the class
			has            string // in the message
		}{
			{name: "valid", stdout: string(good) + "\n"},
			{name: "malformed", stdout: "{not json", is: ErrSchema},
			{name: "empty", stdout: "", is: ErrSchema},
			{name: "another version", stdout: string(otherVersion), is: ErrSchema, has: "version 2"},
			{name: "another op's answer", stdout: `{"schema":"vastrun.agent.other","schema_version":1}`, is: ErrSchema},
			{name: "command failed", stderr: "line 1\nboom: hunter2\n", err: &remote.ExitError{Code: 3}, has: "status 3: line 1\nboom: [redacted]"},
			{name: "connection lost", err: remote.ErrConnectionLost, is: remote.ErrConnectionLost},
			{name: "agent failed", stdout: errAnswer(CodeFailed), err: &remote.ExitError{Code: 1}, is: ErrCallFailed, has: "with [redacted]"},
			{name: "agent speaks another protocol", stdout: errAnswer(CodeUnsupported), err: &remote.ExitError{Code: 1}, is: ErrSchema},
			{name: "an error answer on success", stdout: errAnswer(CodeFailed), is: ErrSchema},
		} {
			t.Run(call.op+"/"+tc.name, func(t *testing.T) {
				f := &fakeRunner{run: func(remote.Command) (string, string, error) { return tc.stdout, tc.stderr, tc.err }}
				c := &Client{R: f, Bin: "vr", Instance: "instance 7", Redact: func(s string) string { return strings.ReplaceAll(s, "hunter2", "[redacted]") }}
				err := call.call(c)
				if tc.name == "valid" {
					if err != nil {
						t.Fatalf("a valid answer: %v", err)
					}
					return
				}
				if err == nil {
					t.Fatal("no error")
				}
				if !strings.HasPrefix(err.Error(), "agent "+call.op+" on instance 7: ") || strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("message %q", err)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("%v is not %v", err, tc.is)
				}
				if tc.err != nil && !errors.Is(err, tc.err) && !errors.As(err, new(*remote.ExitError)) {
					t.Fatalf("%v lost the command's error", err)
				}
				if !strings.Contains(err.Error(), tc.has) {
					t.Fatalf("%q lacks %q", err, tc.has)
				}
			})
		}
	}
}
