// Package mcpserver is `vastrun mcp`: vastrun as a Model Context Protocol
// server (the official Go SDK), for coding agents.
//
// Every tool runs one vastrun command line through a Runner (the CLI runs
// it in-process, with its own streams and redactor) and answers with that
// command's --json document: a tool's result is the same versioned JSON
// the command prints, redacted by the same sink, never a second rendering.
//
// Read-only tools (offers, validate, plan, status, runs, logs, report,
// doctor) are annotated readOnlyHint. The mutating ones (apply a saved
// plan, down a run) first ask the operator through MCP elicitation —
// showing the plan's summary and SHA-256, or the run and what destroys
// it — and run only on an explicit accept; apply then runs with the
// approved hash (apply --sha256), so a plan swapped after the question
// is refused. A client that cannot elicit gets a refusal naming the exact
// command for the operator to run, and nothing is rented or destroyed.
// docs/approval.md is the threat model.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vastrun/vastrun/internal/plan"
)

// Result is what one command line printed, and how it exited.
type Result struct {
	Stdout []byte // redacted
	Stderr []byte // redacted
	Code   int
}

// Runner runs one vastrun command line (args without the program name).
type Runner func(ctx context.Context, args []string) Result

// Options configure the server.
type Options struct {
	Run     Runner
	Version string
	// Global are the global flags each command gets and the operator's
	// commands name (e.g. --sim, --url URL); never a secret.
	Global []string
}

// ApprovalSchema names the document a mutating tool answers with when
// nothing was done: declined, cancelled, or no way to ask.
const ApprovalSchema = "vastrun.mcp.approval/v1"

// Approval is why a mutating tool did nothing, and the command the
// operator can run instead (docs/json.md).
type Approval struct {
	Schema     string `json:"schema"`
	Tool       string `json:"tool"`
	Approved   bool   `json:"approved"`
	Reason     string `json:"reason"` // no_elicitation, declined, cancelled, plan_refused, plan_changed
	Detail     string `json:"detail"`
	PlanSHA256 string `json:"plan_sha256,omitempty"`
	// Command is what the operator runs at a terminal to do it
	// themselves (its prompt shows what is approved).
	Command string `json:"command"`
}

// approvalKey is the input request's id in a mutating tool's elicitation.
const approvalKey = "approval"

// server holds the options the handlers share.
type server struct{ o Options }

func ptr[T any](v T) *T { return &v }

// New builds the MCP server with vastrun's tools.
func New(o Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "vastrun", Title: "vastrun: disposable GPU rentals on Vast.ai", Version: o.Version}, &mcp.ServerOptions{
		Instructions: "vastrun rents disposable GPUs on Vast.ai. Read the config and call validate, then plan; show the plan's summary and sha256 to the operator; " +
			"call apply only to run a plan the operator wants — apply asks the operator itself and rents nothing without their accept; read the receipt it returns; " +
			"call down whenever a run may still hold an instance. See skills/vastrun/SKILL.md.",
	})
	h := &server{o: o}
	readOnly := func(title string) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, OpenWorldHint: ptr(true)}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "offers", Description: "Search the marketplace's offers (vastrun offers --json), or judge them against a config's gpu: policy (policy + explain).",
		Annotations: readOnly("Search GPU offers")}, h.offers)
	mcp.AddTool(s, &mcp.Tool{Name: "validate", Description: "Preflight a config: every value, the image digest, uploads, secrets, GPU names and live offers (vastrun validate --json). Nothing is written.",
		Annotations: readOnly("Validate a config")}, h.validate)
	mcp.AddTool(s, &mcp.Tool{Name: "plan", Description: "Run a workflow (ci, canary, train) up to its approval and save the plan (vastrun plan --json): nothing is rented. " +
		"Answers the plan (vastrun.plan/v1) with its sha256; show its summary to the operator before apply.",
		Annotations: readOnly("Plan a GPU run (rents nothing)")}, h.plan)
	mcp.AddTool(s, &mcp.Tool{Name: "status", Description: "The latest (or a named) run's instances and their live states (vastrun status --json).",
		Annotations: readOnly("Run status")}, h.status)
	mcp.AddTool(s, &mcp.Tool{Name: "runs", Description: "The runs in the state directory with their outcomes (vastrun runs --json).",
		Annotations: readOnly("List runs")}, h.runs)
	mcp.AddTool(s, &mcp.Tool{Name: "logs", Description: "A run's redacted output (vastrun logs RUN).",
		Annotations: readOnly("Run logs")}, h.logs)
	mcp.AddTool(s, &mcp.Tool{Name: "report", Description: "A run's receipt (vastrun report RUN --json).",
		Annotations: readOnly("Run receipt")}, h.report)
	mcp.AddTool(s, &mcp.Tool{Name: "doctor", Description: "Check the API key: reachable, what it may do, whether it is read-only (vastrun doctor --json).",
		Annotations: readOnly("Check the setup")}, h.doctor)
	mcp.AddTool(s, &mcp.Tool{Name: "apply", Description: "Run a saved plan (vastrun apply PLAN): rents GPUs and spends money. The operator is asked first " +
		"(elicitation, with the plan's summary and sha256); nothing is rented without their accept. Answers the run's receipt.",
		Annotations: &mcp.ToolAnnotations{Title: "Apply a saved plan (rents GPUs)", DestructiveHint: ptr(false), OpenWorldHint: ptr(true)}}, h.apply)
	mcp.AddTool(s, &mcp.Tool{Name: "down", Description: "Destroy a run's instances and confirm they are gone (vastrun down). The operator is asked first (elicitation); " +
		"nothing is destroyed without their accept. Propose it whenever a run may still hold an instance.",
		Annotations: &mcp.ToolAnnotations{Title: "Destroy a run's instances", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(true)}}, h.down)
	return s
}

// OffersIn are the offers tool's arguments.
type OffersIn struct {
	Query   string `json:"query,omitempty" jsonschema:"a query as the official vast CLI writes it, e.g. gpu_name=RTX_4090 num_gpus=1"`
	Policy  string `json:"policy,omitempty" jsonschema:"a vastrun.yaml whose gpu: policy judges the offers"`
	Explain bool   `json:"explain,omitempty" jsonschema:"with policy: say why each offer is chosen or rejected"`
	Limit   int    `json:"limit,omitempty" jsonschema:"at most this many offers (default 20)"`
}

// ConfigIn names a config file.
type ConfigIn struct {
	Config string `json:"config,omitempty" jsonschema:"the config file (default vastrun.yaml)"`
}

// ValidateIn are the validate tool's arguments.
type ValidateIn struct {
	Config  string `json:"config,omitempty" jsonschema:"the config file (default vastrun.yaml)"`
	Offline bool   `json:"offline,omitempty" jsonschema:"only the local checks"`
}

// PlanIn are the plan tool's arguments.
type PlanIn struct {
	Workflow string `json:"workflow,omitempty" jsonschema:"ci (default), canary or train"`
	Config   string `json:"config,omitempty" jsonschema:"the config file (default vastrun.yaml)"`
	Out      string `json:"out,omitempty" jsonschema:"where to write the plan (default plan.json)"`
	TTL      string `json:"ttl,omitempty" jsonschema:"how long the plan may be applied, e.g. 30m (default 1h)"`
	SkipGate bool   `json:"skip_gate,omitempty" jsonschema:"do not run the gate: commands now"`
}

// RunIn names a run.
type RunIn struct {
	Run    string `json:"run,omitempty" jsonschema:"the run id (default: the latest)"`
	Config string `json:"config,omitempty" jsonschema:"the config file, for its state_dir (default vastrun.yaml)"`
}

// ApplyIn are the apply tool's arguments.
type ApplyIn struct {
	Plan string `json:"plan" jsonschema:"the saved plan's file, as plan wrote it"`
}

func (s *server) offers(ctx context.Context, _ *mcp.CallToolRequest, in OffersIn) (*mcp.CallToolResult, any, error) {
	args := []string{"offers"}
	if in.Policy != "" {
		args = append(args, "--policy", in.Policy)
		if in.Explain {
			args = append(args, "--explain")
		}
	}
	if in.Limit > 0 {
		args = append(args, "--limit", fmt.Sprint(in.Limit))
	}
	if q := strings.Fields(in.Query); len(q) > 0 {
		args = append(append(args, "--"), q...)
	}
	return s.json(ctx, args)
}

func (s *server) validate(ctx context.Context, _ *mcp.CallToolRequest, in ValidateIn) (*mcp.CallToolResult, any, error) {
	args := []string{"validate", "-f", orDefault(in.Config, "vastrun.yaml")}
	if in.Offline {
		args = append(args, "--offline")
	}
	return s.json(ctx, args)
}

func (s *server) plan(ctx context.Context, _ *mcp.CallToolRequest, in PlanIn) (*mcp.CallToolResult, any, error) {
	args := []string{"plan", orDefault(in.Workflow, "ci"), "-f", orDefault(in.Config, "vastrun.yaml"), "-o", orDefault(in.Out, "plan.json")}
	if in.TTL != "" {
		args = append(args, "--ttl", in.TTL)
	}
	if in.SkipGate {
		args = append(args, "--skip-gate")
	}
	return s.json(ctx, args)
}

func (s *server) status(ctx context.Context, _ *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, any, error) {
	return s.json(ctx, withRun([]string{"status", "-f", orDefault(in.Config, "vastrun.yaml")}, "--run", in.Run))
}

func (s *server) runs(ctx context.Context, _ *mcp.CallToolRequest, in ConfigIn) (*mcp.CallToolResult, any, error) {
	return s.json(ctx, []string{"runs", "-f", orDefault(in.Config, "vastrun.yaml")})
}

func (s *server) logs(ctx context.Context, _ *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, any, error) {
	args := []string{"logs", "--file", orDefault(in.Config, "vastrun.yaml")}
	if in.Run != "" {
		args = append(args, in.Run)
	}
	// logs prints the run's output itself (it has no JSON form): the
	// result is that text.
	r := s.o.Run(ctx, append(append([]string(nil), s.o.Global...), args...))
	if r.Code != 0 {
		return failed(args, r), nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Stdout)}}}, nil, nil
}

func (s *server) report(ctx context.Context, _ *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, any, error) {
	args := []string{"report", "-f", orDefault(in.Config, "vastrun.yaml")}
	if in.Run != "" {
		args = append(args, in.Run)
	}
	return s.json(ctx, args)
}

func (s *server) doctor(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	return s.json(ctx, []string{"doctor"})
}

func (s *server) apply(ctx context.Context, req *mcp.CallToolRequest, in ApplyIn) (*mcp.CallToolResult, any, error) {
	if in.Plan == "" {
		return errorText("apply: name the saved plan's file (plan)"), nil, nil
	}
	p, err := plan.Read(in.Plan)
	if err != nil {
		return s.refuse(Approval{Tool: "apply", Reason: "plan_refused", Detail: err.Error(),
			Command: s.command("plan", "-o", in.Plan)}), nil, nil
	}
	operator := s.command("apply", in.Plan, "--sha256", p.SHA256)
	if req.Params.InputResponses == nil {
		summary := strings.Join(p.Summary(), "\n")
		return s.ask(req, "apply", p.SHA256, operator,
			"An agent asks to apply this saved vastrun plan. It rents GPUs and spends money.\n\n"+summary+
				"\n\nApply plan "+p.SHA256+"?",
			"Apply plan "+p.Short()+" (rents GPUs)"), nil, nil
	}
	if r := s.answered(req, "apply", p.SHA256, operator); r != nil {
		return r, nil, nil
	}
	// The approved plan, and only it: apply refuses any other file.
	return s.json(ctx, []string{"apply", in.Plan, "--yes", "--sha256", p.SHA256})
}

func (s *server) down(ctx context.Context, req *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, any, error) {
	args := withRun([]string{"down", "-f", orDefault(in.Config, "vastrun.yaml")}, "--run", in.Run)
	operator := s.command(args...)
	if req.Params.InputResponses == nil {
		what := "the latest run"
		if in.Run != "" {
			what = "run " + in.Run
		}
		st := s.o.Run(ctx, append(append([]string(nil), s.o.Global...), withRun([]string{"status", "-f", orDefault(in.Config, "vastrun.yaml")}, "--run", in.Run)...))
		return s.ask(req, "down", "", operator,
			"An agent asks to destroy the instances of "+what+" and confirm they are gone ("+operator+" --yes).\n\n"+
				clip(string(st.Stdout)+string(st.Stderr), 2000)+"\n\nDestroy them?",
			"Destroy the instances of "+what), nil, nil
	}
	if r := s.answered(req, "down", "", operator); r != nil {
		return r, nil, nil
	}
	return s.json(ctx, append(args, "--yes"))
}

// ask asks the operator through elicitation, or refuses when the client
// cannot: nothing is done either way until an answer comes.
func (s *server) ask(req *mcp.CallToolRequest, tool, sha, operator, message, title string) *mcp.CallToolResult {
	if caps := req.ClientCapabilities(); caps == nil || caps.Elicitation == nil {
		return s.refuse(Approval{Tool: tool, Reason: "no_elicitation", PlanSHA256: sha, Command: operator,
			Detail: "this MCP client cannot ask the operator (no elicitation), so nothing was done: ask the operator to run the command at a terminal, where its prompt shows what is approved"})
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{approvalKey: &mcp.ElicitParams{
			Mode:    "form",
			Message: message,
			RequestedSchema: &jsonschema.Schema{Type: "object", Required: []string{"approve"}, Properties: map[string]*jsonschema.Schema{
				"approve": {Type: "boolean", Title: title, Description: "true to go ahead; anything else does nothing"},
			}},
		}},
		RequestState: tool + ":" + sha,
	}
}

// answered reads the operator's answer: nil means an explicit accept of
// the same thing that was asked (the same plan hash).
func (s *server) answered(req *mcp.CallToolRequest, tool, sha, operator string) *mcp.CallToolResult {
	if req.Params.RequestState != tool+":"+sha {
		return s.refuse(Approval{Tool: tool, Reason: "plan_changed", PlanSHA256: sha, Command: operator,
			Detail: "the answer is not for this plan: it changed after the operator was asked; nothing was done"})
	}
	res, _ := req.Params.InputResponses[approvalKey].(*mcp.ElicitResult)
	switch {
	case res == nil:
		return s.refuse(Approval{Tool: tool, Reason: "no_answer", PlanSHA256: sha, Command: operator, Detail: "no answer from the operator; nothing was done"})
	case res.Action == "accept" && res.Content["approve"] == true:
		return nil
	case res.Action == "cancel":
		return s.refuse(Approval{Tool: tool, Reason: "cancelled", PlanSHA256: sha, Command: operator, Detail: "the operator dismissed the question; nothing was done"})
	}
	return s.refuse(Approval{Tool: tool, Reason: "declined", PlanSHA256: sha, Command: operator, Detail: "the operator declined; nothing was done"})
}

func (s *server) refuse(a Approval) *mcp.CallToolResult {
	a.Schema = ApprovalSchema
	b, _ := json.MarshalIndent(a, "", "  ")
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}
}

// command is a vastrun command line for the operator, with the server's
// global flags.
func (s *server) command(args ...string) string {
	words := append([]string{"vastrun"}, args...)
	words = append(words, s.o.Global...)
	for i, w := range words {
		if w == "" || strings.ContainsAny(w, " \t'\"$`\\|&;<>()*?[]#~") {
			words[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(words, " ")
}

// json runs a command with --json and answers its document.
func (s *server) json(ctx context.Context, args []string) (*mcp.CallToolResult, any, error) {
	full := append(append(append([]string(nil), s.o.Global...), "--json"), args...)
	r := s.o.Run(ctx, full)
	if r.Code != 0 {
		return failed(args, r), nil, nil
	}
	return document(r.Stdout), nil, nil
}

// document is a command's stdout as the tool's result: its JSON document
// as structured content (and as text, for clients that read only text).
func document(stdout []byte) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(stdout)}}}
	if isObject(stdout) {
		res.StructuredContent = json.RawMessage(stdout)
	}
	return res
}

func isObject(b []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil
}

// failed is a command that exited non-zero: its stderr (for people, with
// the hint) and its document, when it printed one (a failed run's
// receipt).
func failed(args []string, r Result) *mcp.CallToolResult {
	res := document(r.Stdout)
	res.IsError = true
	msg := fmt.Sprintf("vastrun %s exited %d:\n%s", args[0], r.Code, strings.TrimSpace(string(r.Stderr)))
	if len(r.Stdout) == 0 {
		res.Content = []mcp.Content{&mcp.TextContent{Text: msg}}
	} else {
		res.Content = append([]mcp.Content{&mcp.TextContent{Text: msg}}, res.Content...)
	}
	return res
}

func errorText(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func withRun(args []string, flag, run string) []string {
	if run != "" {
		return append(args, flag, run)
	}
	return args
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
