package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// The MCP server end to end: `vastrun mcp` (the real command, on pipes)
// against a simulator, driven by the SDK's own client. Plan then apply
// with the operator's accept rents and passes; a decline, or a client
// that cannot ask, rents nothing. Every tool answer is checked for the
// API key and a declared secret.

const (
	mcpKey    = "mcp-test-key-0123456789abcdef0123456789abcdef"
	mcpSecret = "s3cret-token-value-7f3a9c1e5b"
)

type mcpEnv struct {
	t   *testing.T
	sim *sim.Server
	env map[string]string
	dir string
	// seen is every tool answer's text, checked for secrets at the end.
	mu   sync.Mutex
	seen []string
}

func newMCPEnv(t *testing.T) *mcpEnv {
	t.Helper()
	s, err := sim.New(sim.Config{APIKey: mcpKey, Clock: clock.NewScaled(time.Now(), 60)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	dir := t.TempDir()
	t.Chdir(dir)
	for name, body := range map[string]string{
		"vastrun.yaml": `image: ghcr.io/acme/gpu-test@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
test: sh gpu-test.sh
upload: [gpu-test.sh]
secrets: [MCP_TEST_TOKEN]
gpu:
  models: [RTX_4090, RTX_3090]
  min_vram_gb: 20
  max_dph: 1.0
budget:
  max_spend: 5
timeouts:
  ready: 2m
  job: 1m
  teardown: 30s
`,
		"gpu-test.sh": "#!/bin/sh\nnvidia-smi --query-gpu=name --format=csv,noheader\necho \"token is $MCP_TEST_TOKEN\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &mcpEnv{t: t, sim: s, dir: dir, env: map[string]string{
		"VAST_URL": srv.URL, "VAST_API_KEY": mcpKey, "MCP_TEST_TOKEN": mcpSecret, "HOME": dir,
		"VASTRUN_CONTAINER_ENGINE": "none", "PATH": os.Getenv("PATH"),
	}}
}

func (m *mcpEnv) rented() int {
	st := m.sim.Snapshot()
	return len(st.Live) + len(st.Gone)
}

// connect starts `vastrun mcp` on pipes and connects a client to it;
// transcript, when not nil, receives the JSON-RPC messages.
func (m *mcpEnv) connect(opts *mcp.ClientOptions, version string, transcript io.Writer) *mcp.ClientSession {
	t := m.t
	ctx, cancel := context.WithCancel(context.Background())
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	f := &Factory{IO: NewIOStreams(toServer, fromServer, io.Discard), Getenv: func(k string) string { return m.env[k] }, HomeDir: m.dir}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, f, []string{"mcp"})
		fromServer.Close()
	}()
	var tr mcp.Transport = &mcp.IOTransport{Reader: toClient, Writer: fromClient}
	if transcript != nil {
		tr = &mcp.LoggingTransport{Transport: tr, Writer: transcript}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "vastrun-test-client", Version: "v1"}, opts)
	cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		fromClient.Close()
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("vastrun mcp exited %d", code)
		}
	})
	return cs
}

// call calls a tool and returns its result and the text of its content.
func (m *mcpEnv) call(cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		m.t.Fatalf("%s: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	b, _ := json.Marshal(res.StructuredContent)
	m.mu.Lock()
	m.seen = append(m.seen, text.String(), string(b))
	m.mu.Unlock()
	return res, text.String()
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content is not a JSON object: %s", b)
	}
	return m
}

func (m *mcpEnv) noSecrets() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.seen {
		for _, secret := range []string{mcpKey, mcpSecret} {
			if strings.Contains(s, secret) {
				m.t.Errorf("a tool answer holds a secret: %.300s", s)
			}
		}
	}
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestMCPToolsAndApplyWithElicitation(t *testing.T) {
	m := newMCPEnv(t)
	var transcript bytes.Buffer
	var asked []string
	cs := m.connect(&mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked = append(asked, req.Params.Message)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}}, "2025-11-25", &transcript)

	// tools/list: every tool, annotated.
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{}
	for _, tool := range tools.Tools {
		if tool.Annotations == nil {
			t.Fatalf("tool %s has no annotations", tool.Name)
		}
		readOnly[tool.Name] = tool.Annotations.ReadOnlyHint
	}
	for _, name := range []string{"offers", "validate", "plan", "status", "runs", "logs", "report", "doctor"} {
		if ro, ok := readOnly[name]; !ok || !ro {
			t.Errorf("tool %s: listed %v, readOnlyHint %v; want a read-only tool", name, ok, ro)
		}
	}
	for _, name := range []string{"apply", "down"} {
		if ro, ok := readOnly[name]; !ok || ro {
			t.Errorf("tool %s: listed %v, readOnlyHint %v; want a mutating tool", name, ok, ro)
		}
	}

	res, _ := m.call(cs, "plan", map[string]any{"out": "plan.json"})
	if res.IsError {
		t.Fatalf("plan failed: %+v", res.Content)
	}
	doc := structured(t, res)
	sha, _ := doc["sha256"].(string)
	if doc["schema"] != "vastrun.plan/v1" || !sha256RE.MatchString(sha) {
		t.Fatalf("plan answered %v", doc)
	}
	if n := m.rented(); n != 0 {
		t.Fatalf("plan rented %d instances", n)
	}

	res, _ = m.call(cs, "apply", map[string]any{"plan": "plan.json"})
	if res.IsError {
		t.Fatalf("apply failed: %+v", res.Content)
	}
	if len(asked) != 1 || !strings.Contains(asked[0], sha) || !strings.Contains(asked[0], "rent offer") {
		t.Fatalf("the operator was asked %q; want one question naming plan %s and its offer", asked, sha)
	}
	rec := structured(t, res)
	if rec["schema"] != "vastrun.receipt/v1" || rec["outcome"] != "passed" || rec["plan_sha256"] != sha {
		t.Fatalf("apply answered %v", rec)
	}
	if n, live := m.rented(), len(m.sim.Snapshot().Live); n != 1 || live != 0 {
		t.Fatalf("after apply: %d rented, %d live; want 1 and 0", n, live)
	}
	// The run's output, through the tools: the secret the test printed
	// is masked.
	res, text := m.call(cs, "logs", map[string]any{"run": rec["run_id"]})
	if res.IsError || !strings.Contains(text, "token is ") {
		t.Fatalf("logs answered %v: %s", res.IsError, text)
	}
	for _, tool := range []string{"runs", "report", "doctor", "validate"} {
		if res, text := m.call(cs, tool, nil); res.IsError {
			t.Errorf("%s failed: %s", tool, text)
		}
	}
	m.noSecrets()
	if p := os.Getenv("VASTRUN_MCP_TRANSCRIPT"); p != "" {
		os.WriteFile(p, transcript.Bytes(), 0o644)
	}
}

func TestMCPApplyDeclinedRentsNothing(t *testing.T) {
	m := newMCPEnv(t)
	asked := 0
	// An older client: the server asks with a request of its own
	// (elicitation/create) rather than an input-required result.
	cs := m.connect(&mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked++
		return &mcp.ElicitResult{Action: "decline"}, nil
	}}, "", nil)
	if res, text := m.call(cs, "plan", map[string]any{"out": "plan.json"}); res.IsError {
		t.Fatalf("plan failed: %s", text)
	}
	res, text := m.call(cs, "apply", map[string]any{"plan": "plan.json"})
	got := structured(t, res)
	if !res.IsError || got["reason"] != "declined" || got["approved"] != false || asked != 1 {
		t.Fatalf("declined apply answered %v (asked %d times): %s", got, asked, text)
	}
	if n := m.rented(); n != 0 {
		t.Fatalf("a declined apply rented %d instances", n)
	}
	m.noSecrets()
}

func TestMCPApplyWithoutElicitationIsRefused(t *testing.T) {
	m := newMCPEnv(t)
	cs := m.connect(nil, "", nil) // no elicitation handler: the client cannot ask
	res, _ := m.call(cs, "plan", map[string]any{"out": "plan.json"})
	sha, _ := structured(t, res)["sha256"].(string)
	res, text := m.call(cs, "apply", map[string]any{"plan": "plan.json"})
	got := structured(t, res)
	if !res.IsError || got["reason"] != "no_elicitation" || got["command"] != "vastrun apply plan.json --sha256 "+sha {
		t.Fatalf("apply without elicitation answered %v: %s", got, text)
	}
	res, _ = m.call(cs, "down", nil)
	if got := structured(t, res); !res.IsError || got["reason"] != "no_elicitation" || got["command"] != "vastrun down -f vastrun.yaml" {
		t.Fatalf("down without elicitation answered %v", got)
	}
	if n := m.rented(); n != 0 {
		t.Fatalf("apply without elicitation rented %d instances", n)
	}
	m.noSecrets()
}
