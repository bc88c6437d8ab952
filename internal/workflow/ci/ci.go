// Package ci is the acceptance workflow: rent exactly one instance, verify
// it, upload, run the configured test under the job timeout, tear down on
// every path. Its receipt section is the test's outcome (receipt "test");
// its outcome is the shared classification (a non-zero test exit is
// "failed"). [UpFlow] is its split form: the verified instance is kept for
// `exec` and `down`.
//
// The workflow reads only the run's frozen spec ([lifecycle.Run.Frozen]),
// never the configuration, and names nothing but the core's API.
package ci

import (
	"context"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Name is the workflow's name in the journal, manifest and receipt.
const Name = "ci"

// Flow is the acceptance step: the local steps, one verified instance,
// the upload, then the test. A resumed run walks the same list: a live
// instance of the run is re-attached to, never rented again, and the test
// runs again (how its interrupted run ended is unknown).
func Flow() lifecycle.Flow {
	t := &test{}
	return lifecycle.Flow{
		Name:    Name,
		Steps:   append(append(lifecycle.LocalSteps(), lifecycle.Rent()...), lifecycle.Upload, lifecycle.NewStep("test", t.run)),
		Section: func(r *receipt.Receipt) { r.Test = t.res },
	}
}

// UpFlow prepares and provisions, leaving a verified instance running for
// later `exec` and `down` calls. A failure tears down what it rented. Its
// dead-man switch's TTL is a lease (up --ttl) that exec, ssh and status
// renew.
func UpFlow() lifecycle.Flow {
	return lifecycle.Flow{
		Name:  "up",
		Keep:  true,
		Steps: append(append(lifecycle.LocalSteps(), lifecycle.Rent()...), lifecycle.Upload),
	}
}

// Run runs a new acceptance step on s (lifecycle.New on its wiring).
func Run(ctx context.Context, s *lifecycle.Scope) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, s, Flow())
}

// Resume continues a ci run whose controller died (s opened with Open).
func Resume(ctx context.Context, s *lifecycle.Scope) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, s, Flow())
}

// Up runs UpFlow as a new run on s.
func Up(ctx context.Context, s *lifecycle.Scope) (*receipt.Receipt, error) {
	return lifecycle.Execute(ctx, s, UpFlow())
}

// test is the frozen test on the connected, verified instance; res is
// its outcome for the receipt.
type test struct{ res *receipt.TestOutcome }

func (t *test) run(ctx context.Context, s *lifecycle.Scope) error {
	env, err := s.TestEnv()
	if err != nil {
		return err
	}
	cmd := s.Frozen().Test
	s.Infof("running the test on instance %d: %s", s.Inst.ID, cmd)
	s.Mark("test_start")
	t0 := s.Now()
	res, err := s.Work(ctx, s.Conn, cmd, env)
	s.Mark("test_end")
	s.AddTiming("test", s.Now().Sub(t0))
	t.res = res
	if err != nil {
		return err
	}
	if !res.Passed() {
		return &lifecycle.TestFailedError{Code: res.Code()}
	}
	s.Infof("the test passed")
	return nil
}
