package cli

import (
	"os"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/vastrun/vastrun/internal/plan"
)

// cmdPlanAge makes a saved plan as old as DURATION, sealed again, as if it
// had been made that long ago (a plan's age is its own dates: no script
// waits on the clock):
//
//	planage FILE DURATION
func cmdPlanAge(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: planage FILE DURATION")
	}
	age, err := time.ParseDuration(args[1])
	ts.Check(err)
	path := ts.MkAbs(args[0])
	p, err := plan.Read(path)
	ts.Check(err)
	p.CreatedAt, p.ExpiresAt = p.CreatedAt.Add(-age), p.ExpiresAt.Add(-age)
	ts.Check(p.Seal())
	b, err := p.Marshal()
	ts.Check(err)
	ts.Check(os.WriteFile(path, b, 0o644))
}
