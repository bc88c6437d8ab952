package cli

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// shapeArgs are, for every command that does work, arguments its parsing
// accepts: the test runs each through the real tree and expects its
// options back through runCmd. A command missing here fails the test, so a
// new command is written in the gh shape (Options + NewCmdX(f, runF) +
// runX(ctx, opts), RunE from runCmd) and gets a row.
var shapeArgs = map[string]string{
	"vastrun agent call":         "",
	"vastrun agent deadman":      "",
	"vastrun agent heartbeat":    "--serve",
	"vastrun agent manifest":     "out",
	"vastrun agent restore":      "",
	"vastrun agent retire-lost":  "",
	"vastrun agent start":        "--command true",
	"vastrun agent status":       "",
	"vastrun agent supervise":    "",
	"vastrun agent upload":       "",
	"vastrun agent watch":        "",
	"vastrun budget":             "",
	"vastrun canary":             "",
	"vastrun canary init":        "",
	"vastrun canary validate":    "",
	"vastrun checkpoint commit":  "--store file:///s --dir d",
	"vastrun checkpoint restore": "--store file:///s --dir d",
	"vastrun ci":                 "",
	"vastrun doctor":             "",
	"vastrun down":               "",
	"vastrun exec":               "-- true",
	"vastrun init":               "",
	"vastrun logs":               "",
	"vastrun mcp":                "",
	"vastrun plan":               "",
	"vastrun apply":              "plan.json",
	"vastrun offers":             "",
	"vastrun publish":            "",
	"vastrun reap":               "",
	"vastrun report":             "",
	"vastrun resume":             "",
	"vastrun runs":               "",
	"vastrun sim serve":          "",
	"vastrun ssh":                "",
	"vastrun status":             "",
	"vastrun sweep":              "",
	"vastrun train":              "",
	"vastrun up":                 "",
	"vastrun validate":           "",
	"vastrun version":            "",
}

// groups only hold subcommands; usageForGroups makes them refuse a call.
var shapeGroups = map[string]bool{"vastrun agent": true, "vastrun checkpoint": true, "vastrun sim": true}

func TestEveryCommandHasTheGhShape(t *testing.T) {
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" { // cobra's own
				continue
			}
			walk(sub)
		}
		if !c.HasParent() { // the root only routes: help, --version, unknown commands
			return
		}
		path := c.CommandPath()
		seen[path] = true
		if shapeGroups[path] {
			return
		}
		if c.RunE == nil {
			t.Errorf("%s does nothing and is no group: build it with NewCmdX(f, runF) and runCmd", path)
			return
		}
		args, ok := shapeArgs[path]
		if !ok {
			t.Errorf("%s is not in shapeArgs: build it in the gh shape (Options, NewCmdX(f, runF), runX(ctx, opts), RunE from runCmd) and add a row", path)
			return
		}
		var got []any
		probe := func(cmd *cobra.Command, opts any) error {
			if cmd.CommandPath() != path {
				t.Errorf("%s: probe reached from %s", path, cmd.CommandPath())
			}
			got = append(got, opts)
			return nil
		}
		root := NewRootCmd(opsFactory())
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(append(strings.Fields(strings.TrimPrefix(path, "vastrun ")), strings.Fields(args)...))
		err := root.ExecuteContext(context.WithValue(context.Background(), shapeProbeKey{}, probe))
		if err != nil {
			t.Errorf("%s %s: %v (the row's arguments must parse)", path, args, err)
			return
		}
		if len(got) != 1 {
			t.Errorf("%s: its RunE handed over no options (%d calls): it does its own work instead of going through runCmd", path, len(got))
			return
		}
		ty := reflect.TypeOf(got[0])
		if ty.Kind() != reflect.Pointer || ty.Elem().Kind() != reflect.Struct || !strings.HasSuffix(ty.Elem().Name(), "Options") {
			t.Errorf("%s: options are a %v, want a pointer to an XOptions struct", path, ty)
		}
	}
	walk(NewRootCmd(opsFactory()))
	for path := range shapeArgs {
		if !seen[path] {
			t.Errorf("shapeArgs names %s, which is not a command: remove the row", path)
		}
	}
	for path := range shapeGroups {
		if !seen[path] {
			t.Errorf("shapeGroups names %s, which is not a command", path)
		}
	}
}

// A group refuses to run without a subcommand, as a usage error.
func TestGroupsRefuseToRunAlone(t *testing.T) {
	for path := range shapeGroups {
		root := NewRootCmd(opsFactory())
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(strings.Fields(strings.TrimPrefix(path, "vastrun ")))
		var ue *UsageError
		if err := root.Execute(); !errors.As(err, &ue) || ue.Hint == "" {
			t.Errorf("%s alone: %v, want a usage error with a hint", path, err)
		}
	}
}
