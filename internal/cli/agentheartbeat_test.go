package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/agent"
)

func TestNewCmdAgentHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		args    string
		want    AgentHeartbeatOptions
		wantErr string
	}{
		{args: "", want: AgentHeartbeatOptions{}},
		{args: "--serve", want: AgentHeartbeatOptions{Serve: true}},
		{args: "--serve --json", want: AgentHeartbeatOptions{Serve: true}},
		{args: "extra", wantErr: "unknown command"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var got *AgentHeartbeatOptions
			cmd := NewCmdAgentHeartbeat(opsFactory(), func(_ context.Context, o *AgentHeartbeatOptions) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tc.args))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || got != nil {
					t.Fatalf("err %v (runF called: %v), want %q", err, got != nil, tc.wantErr)
				}
				return
			}
			if err != nil || got == nil || got.Serve != tc.want.Serve {
				t.Fatalf("%q: %+v %v", tc.args, got, err)
			}
		})
	}
}

// `agent heartbeat --serve` answers each request line on stdin with one
// line on stdout, in the login directory's layout, until stdin ends.
func TestAgentHeartbeatServes(t *testing.T) {
	t.Chdir(t.TempDir())
	var out bytes.Buffer
	f := &Factory{IO: &IOStreams{In: strings.NewReader(`{"schema":"vastrun.agent.heartbeat","schema_version":1,"seq":1}` + "\n" +
		`{"schema":"vastrun.agent.heartbeat","schema_version":1,"seq":2}` + "\n"), Out: &out, ErrOut: io.Discard}}
	if err := runAgentHeartbeat(context.Background(), &AgentHeartbeatOptions{f: f, Serve: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("answers: %q", out.String())
	}
	for i, l := range lines {
		if a, err := agent.DecodeHeartbeatAnswer([]byte(l), uint64(i+1)); err != nil || !a.OK {
			t.Fatalf("answer %d: %+v %v", i+1, a, err)
		}
	}
	if _, err := os.Stat(agent.Heartbeat); err != nil {
		t.Fatalf("the heartbeat was not touched: %v", err)
	}
}
