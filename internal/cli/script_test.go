package cli

import (
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

// TestMain registers the real entry point as the "vastrun" command of the
// testscript scenarios in testdata/script.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"vastrun": func() { os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "../../testdata/script",
		Setup: func(e *testscript.Env) error {
			// Scripts must never reach the real API or read a real key.
			e.Setenv("HOME", e.WorkDir)
			e.Setenv("VAST_API_KEY", "")
			e.Setenv("VAST_URL", "http://127.0.0.1:1")
			e.Values[simKey{}] = &simHolder{}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"sim": cmdSim},
	})
}

// cmdSim drives a simulator from a script:
//
//	sim start KEY    serve a simulator accepting KEY; sets VAST_URL
//	sim live N       assert N live (not destroyed) instances
func cmdSim(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: sim start KEY | sim live N")
	}
	switch args[0] {
	case "start":
		s, err := sim.New(sim.Config{APIKey: args[1], DisableSSH: true})
		ts.Check(err)
		srv := httptest.NewServer(s)
		ts.Defer(func() { srv.Close(); s.Close() })
		ts.Setenv("VAST_URL", srv.URL)
		ts.Value(simKey{}).(*simHolder).s = s
	case "live":
		s := ts.Value(simKey{}).(*simHolder).s
		if s == nil {
			ts.Fatalf("sim live: no simulator started")
		}
		want, err := strconv.Atoi(args[1])
		ts.Check(err)
		got := len(s.Snapshot().Live)
		if (got == want) == neg {
			ts.Fatalf("live instances: got %d, want %s%d", got, map[bool]string{true: "not ", false: ""}[neg], want)
		}
		fmt.Fprintf(ts.Stdout(), "%d live\n", got)
	default:
		ts.Fatalf("unknown sim subcommand %q", args[0])
	}
}

type simKey struct{}

// simHolder carries a script's simulator between its commands.
type simHolder struct{ s *sim.Server }
