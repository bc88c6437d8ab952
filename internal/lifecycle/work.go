package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
)

// ResultPath is where, relative to the login directory, a test may write
// its JSON result; $VASTRUN_RESULT holds the absolute path.
const ResultPath = ".vastrun/result.json"

// TestOutcome is how a command on the instance ended.
// testEnv is the environment the test gets: config env, declared secrets
// (read from vastrun's own environment), and run facts.
func testEnv(e *Scope) (map[string]string, error) {
	env := map[string]string{}
	for k, v := range e.Frozen().Env {
		env[k] = v
	}
	var missing []string
	for _, name := range e.Frozen().SecretNames {
		v := e.Getenv(name)
		if v == "" {
			missing = append(missing, name)
			continue
		}
		env[name] = v
		e.Redactor.Add(v)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("secrets %v are declared in the config but not set in the environment", missing)
	}
	env["VASTRUN_RUN_ID"] = e.state.RunID
	env["VASTRUN_LABEL"] = e.state.Label
	return env, nil
}

// uploader is what the upload step needs of its connection to the
// instance: *remote.Client over SSH is the real one; the step tables use
// an in-memory fake.
type uploader interface {
	// Upload and UploadProgress copy the local path (a file or a tree) to
	// remote, relative to the login directory.
	Upload(local, remote string) error
	UploadProgress(local, remote string, progress func(copied int64)) error
	// Output runs script and returns its standard output.
	Output(ctx context.Context, script string) (string, error)
}

var _ uploader = (*remote.Client)(nil)

// upload copies the config's upload paths to the same relative paths; with
// workdir set, the workdir and those paths travel as one archive instead.
func upload(e *Scope, c uploader) error {
	if e.Frozen().Workdir != "" {
		return syncWorkdir(e, c)
	}
	var total int64
	for _, u := range e.Frozen().Upload {
		local := filepath.Join(e.RepoDir, u)
		if _, err := os.Stat(local); err != nil {
			return fmt.Errorf("upload %s: %w", u, err)
		}
		total += treeSize(local)
	}
	pr := &uploadProgress{total: total, say: e.Infof}
	for _, u := range e.Frozen().Upload {
		local := filepath.Join(e.RepoDir, u)
		if err := c.UploadProgress(local, filepath.ToSlash(filepath.Clean(u)), pr.at(u)); err != nil {
			return err
		}
		pr.done(u)
	}
	return nil
}

// uploadProgressMin is the smallest upload worth progress lines: below it
// an upload takes no time worth watching.
const uploadProgressMin = 8 << 20

// uploadProgress says how far the uploads are, at each quarter of the total
// bytes, so a large upload is never a silent wait. A redialled try of one
// path copies it again; its bytes count once.
type uploadProgress struct {
	total    int64
	finished int64 // bytes of the paths already uploaded
	current  int64 // bytes of the path being uploaded, this try
	said     int   // quarters already said
	size     map[string]int64
	say      func(format string, args ...any)
}

func (p *uploadProgress) at(path string) func(int64) {
	return func(copied int64) {
		if p.size == nil {
			p.size = map[string]int64{}
		}
		p.current = max(p.current, copied)
		p.size[path] = p.current
		p.report()
	}
}

func (p *uploadProgress) done(path string) {
	p.finished += p.size[path]
	p.current = 0
	p.report()
}

func (p *uploadProgress) report() {
	if p.total < uploadProgressMin || p.say == nil {
		return
	}
	sent := min(p.finished+p.current, p.total)
	q := int(sent * 4 / p.total)
	if q > p.said {
		p.said = q
		p.say("uploaded %d%% (%.1f of %.1f MB)", q*25, float64(sent)/1e6, float64(p.total)/1e6)
	}
}

// treeSize is the bytes of the regular files under path (0 when unreadable:
// it only sizes progress lines).
func treeSize(path string) int64 {
	var n int64
	filepath.Walk(path, func(_ string, info os.FileInfo, err error) error { //nolint:errcheck // the function returns nil for every path, so Walk does too
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// work runs the test under the job timeout, streaming redacted output to
// the terminal and to test.log, then fetches its JSON result, if any.
func work(ctx context.Context, e *Scope, c *remote.Client, script string, env map[string]string) (*receipt.TestOutcome, error) {
	out, err := e.Sink().Create(filepath.Join(e.EvidenceDir, "test.log"), 0o644, e.Stream)
	if err != nil {
		return nil, err
	}
	// On the early returns; once the command ends the log is closed below
	// and checked.
	defer func() { _ = out.Close() }() // the command never ran, or the log was closed and checked already

	jctx, cancel := context.WithTimeout(ctx, e.jobTimeout())
	defer cancel()
	if err := e.Record("intent", stepWork, map[string]any{"command": script}); err != nil {
		return &receipt.TestOutcome{Log: "test.log"}, &StepError{Step: stepWork, Err: err} // not run: no intent, no side effect
	}
	full := `VASTRUN_RESULT="$PWD/` + ResultPath + `"; export VASTRUN_RESULT; mkdir -p .vastrun; rm -f "$VASTRUN_RESULT"; ` + script
	// The rental's contract is watched beside the command (contract.go),
	// up to the command's own deadline; it stops the command before the
	// contract ends.
	rctx, stopRun := context.WithCancelCause(jctx)
	defer stopRun(nil)
	watched := make(chan struct{})
	if e.Inst.ID != 0 {
		go func() {
			defer close(watched)
			e.WatchContract(e.Inst, e.Now().Add(e.jobTimeout())).watchBeside(rctx, stopRun)
		}()
	} else {
		close(watched)
	}
	// One stream, joined on the instance: test.log keeps the program's order.
	err = c.Run(rctx, remote.Command{Script: full, Env: env, Output: out})
	cause := context.Cause(rctx)
	stopRun(nil)
	<-watched
	// test.log is the test's evidence: a tail that could not be written
	// fails a command that succeeded, as a write refused while it ran does
	// (remote.Run returns that one).
	if cerr := out.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("write test.log: %w", cerr)
	}
	res := &receipt.TestOutcome{Log: "test.log"}
	var ee *remote.ExitError
	if err != nil && cause != nil && jctx.Err() == nil { // stopped by the watch, not done
		if ended, ok := errContractEnded(cause); ok {
			jerr := e.Record("failed", stepWork, map[string]any{"contract_ended": ended.End, "reason": ended.Why})
			return res, errors.Join(&StepError{Step: stepWork, Instance: e.Inst.ID, Outcome: OutcomeContractEnded, Err: ended}, jerr)
		}
		if errors.Is(cause, ErrJournal) {
			return res, &StepError{Step: stepWork, Err: cause}
		}
	}
	switch {
	case ctx.Err() != nil: // interrupted: whatever the session said, the test did not end on its own
		res.Interrupted = true
		return res, ctx.Err()
	case err == nil:
		res.Exited(0)
	case errors.As(err, &ee):
		res.Exited(ee.Code)
		res.Signal = ee.Signal
	case jctx.Err() != nil:
		res.TimedOut = true
		jerr := e.Record("failed", stepWork, map[string]any{"timeout": e.jobTimeout().String()})
		return res, errors.Join(&StepError{Step: stepWork, Outcome: OutcomeTimeout, Err: fmt.Errorf("the test ran past the job timeout %s", e.jobTimeout())}, jerr)
	default:
		return res, &StepError{Step: stepWork, Err: err}
	}
	fetchResult(e, c, res)
	if err := e.Record("done", stepWork, map[string]any{"exit_code": res.Code()}); err != nil {
		return res, &StepError{Step: stepWork, Err: err}
	}
	return res, nil
}

func fetchResult(e *Scope, c *remote.Client, res *receipt.TestOutcome) {
	// Read into memory: the raw result never lies on this machine's disk.
	b, err := c.ReadFile(ResultPath, 1<<20)
	if errors.Is(err, remote.ErrRemoteMissing) {
		return
	}
	if err != nil {
		res.ResultErr = err.Error()
		return
	}
	b = e.maskResult(b)
	if err := json.Unmarshal(b, &res.Result); err != nil {
		res.ResultErr = "result file is not a JSON object: " + err.Error()
	}
	if err := e.Sink().WriteJSON(filepath.Join(e.EvidenceDir, "result.json"), b, 0o644); err != nil && res.ResultErr == "" {
		res.ResultErr = "the result could not be kept in the evidence: " + err.Error()
	}
}
