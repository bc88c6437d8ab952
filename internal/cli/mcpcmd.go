package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/mcpserver"
)

// MCPOptions are `vastrun mcp`'s dependencies: it has no flags of its
// own; the global ones (--sim, --url) go to every tool's command.
type MCPOptions struct {
	f *Factory
}

// NewCmdMCP builds `vastrun mcp`; runF as for NewCmdCI.
func NewCmdMCP(f *Factory, runF func(context.Context, *MCPOptions) error) *cobra.Command {
	opts := &MCPOptions{f: f}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve vastrun's tools to coding agents over the Model Context Protocol (stdio)",
		Long: `Serve the Model Context Protocol on stdin/stdout, for coding agents.

Read-only tools (annotated readOnlyHint): offers, validate, plan, status,
runs, logs, report, doctor. Mutating tools: apply (a saved plan) and down (a
run): each asks the operator through MCP elicitation — with the plan's summary
and SHA-256 — and acts only on an explicit accept; a client that cannot ask
gets a refusal naming the command for the operator to run, and nothing is
rented or destroyed. Each tool answers its command's --json document
(docs/json.md), redacted as the command's own output is.

Give this server only the key it may use: a read-only key lets an agent plan
but never rent (docs/approval.md). Under --sim each tool call runs against its
own embedded simulator, as each command line does; for a session whose runs
outlive one call, serve one with 'vastrun sim serve' and set VAST_URL.`,
		Example: `  vastrun mcp
  claude mcp add vastrun -- vastrun mcp
  vastrun mcp --sim`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, nil, runF, runMCP),
	}
	return cmd
}

func runMCP(ctx context.Context, opts *MCPOptions) error {
	f := opts.f
	s := mcpserver.New(mcpserver.Options{Run: commandRunner(f), Version: Version, Global: globalFlags(f)})
	in := io.NopCloser(f.IO.In)
	out := nopWriteCloser{f.IO.Out}
	err := s.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil // the client went away, or we were stopped
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// globalFlags are the global flags of `vastrun mcp` its tools' commands
// get: never the API key (it reaches them through the environment).
func globalFlags(f *Factory) []string {
	var g []string
	if f.Sim {
		g = append(g, "--sim")
	}
	if f.URL != "" {
		g = append(g, "--url", f.URL)
	}
	for _, fault := range f.SimFaults {
		g = append(g, "--sim-fault", fault)
	}
	return g
}

// commandRunner runs a command line in this process with its own streams
// (stdin empty: nothing may prompt), the factory's environment and clock,
// and returns its output through its own redactor and ours.
func commandRunner(parent *Factory) mcpserver.Runner {
	getenv := parent.Getenv
	if key := parent.APIKey; key != "" {
		getenv = func(k string) string {
			if k == "VAST_API_KEY" {
				return key
			}
			return parent.Getenv(k)
		}
	}
	return func(ctx context.Context, args []string) mcpserver.Result {
		var stdout, stderr bytes.Buffer
		f := &Factory{IO: NewIOStreams(strings.NewReader(""), &stdout, &stderr), Getenv: getenv, HomeDir: parent.HomeDir, Clock: parent.Clock}
		code := Run(ctx, f, args)
		red := f.IO.Redactor()
		red.Add(parent.APIKey)
		red.Add(getenv("VAST_API_KEY"))
		return mcpserver.Result{Stdout: red.JSON(stdout.Bytes()), Stderr: []byte(red.String(stderr.String())), Code: code}
	}
}
