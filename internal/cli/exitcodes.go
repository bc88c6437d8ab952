package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/vastrun/vastrun/internal/container"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/preflight"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Exit codes are an API: CI scripts branch on them. docs/exit-codes.md
// lists them; keep both in step.
const (
	ExitOK          = 0
	ExitError       = 1   // anything not classified below
	ExitUsage       = 2   // bad flags, arguments, query or config
	ExitTestFailed  = 3   // the workload ran and failed (ci, exec)
	ExitAuth        = 4   // the API key is missing, unknown or lacks permission
	ExitNoOffer     = 5   // no offer matched the policy
	ExitNeedsYes    = 6   // spending money needs --yes or an interactive yes
	ExitUnconfirmed = 7   // cleanup could not be confirmed: an instance may still bill
	ExitUnavailable = 8   // the marketplace API could not be reached or kept failing
	ExitBudget      = 9   // the run would exceed, or exceeded, budget.max_spend
	ExitProvision   = 10  // the rental never became a verified, reachable instance (it was destroyed)
	ExitEvidence    = 11  // the run itself passed, but its evidence could not be copied to evidence.uri
	ExitCancelled   = 12  // the person answered no at the prompt: nothing was rented or destroyed
	ExitInterrupted = 130 // SIGINT/SIGTERM
)

// classCodes maps the exit classes of run outcomes (receipt.ExitClass) to
// exit codes. ClassOK and ClassError are absent: an error whose outcome is
// "error" is classified by its type below.
var classCodes = map[receipt.ExitClass]int{
	receipt.ClassTestFailed:    ExitTestFailed,
	receipt.ClassNeedsApproval: ExitNeedsYes,
	receipt.ClassNoOffer:       ExitNoOffer,
	receipt.ClassBudget:        ExitBudget,
	receipt.ClassProvision:     ExitProvision,
	receipt.ClassInterrupted:   ExitInterrupted,
	receipt.ClassCancelled:     ExitCancelled,
}

// UsageError is a mistake in how vastrun was called.
type UsageError struct {
	Err  error
	Hint string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// NeedsApprovalError is lifecycle.ErrNeedsApproval for something other
// than renting: what the command is about to do, said in its own verb.
type NeedsApprovalError struct {
	Doing string // "destroying"
	Shown string // what the person reads above: "will be destroyed"
}

func (e *NeedsApprovalError) Error() string {
	return e.Doing + " needs approval: pass --yes, or run at a terminal and answer yes"
}
func (e *NeedsApprovalError) Unwrap() error { return lifecycle.ErrNeedsApproval }

// NoOfferError means the search or policy left nothing to rent.
type NoOfferError struct{ Msg string }

func (e *NoOfferError) Error() string { return e.Msg }

func exitCode(err error) int {
	var usage *UsageError
	var qe *vast.QueryError
	var noOffer *NoOfferError
	var apiErr *provider.APIError
	var cleanup *lifecycle.CleanupError
	if rest, ok := withoutEvidenceErr(err); ok { // the run's own class first
		if rest == nil {
			return ExitEvidence
		}
		return exitCode(rest)
	}
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &cleanup): // first: an instance may still be billing
		return ExitUnconfirmed
	}
	// A run's own failures are classified once, by their outcome.
	if code, ok := classCodes[lifecycle.Outcome(err).ExitClass()]; ok {
		return code
	}
	switch {
	case errors.Is(err, lifecycle.ErrNeedsApproval):
		return ExitNeedsYes
	case errors.Is(err, lifecycle.ErrDeclined), errors.As(err, new(*CancelledError)):
		return ExitCancelled
	case errors.Is(err, lifecycle.ErrNoOffer):
		return ExitNoOffer
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.As(err, &usage), errors.As(err, &qe), errors.As(err, new(*preflight.Error)), errors.As(err, new(*NoRunError)),
		errors.As(err, new(*container.MissingImageError)):
		return ExitUsage
	case errors.Is(err, vast.ErrNoAPIKey), errors.Is(err, provider.ErrAuth), errors.As(err, new(*ScopeError)):
		return ExitAuth
	case errors.As(err, &noOffer):
		return ExitNoOffer
	case errors.As(err, &apiErr) && (apiErr.Temporary() || apiErr.Status >= 500):
		return ExitUnavailable
	case isTransport(err):
		return ExitUnavailable
	}
	return ExitError
}

// hints returns the lines that tell a person how to fix err. Each comes
// from the error's type; an error of no known class gets no hint rather
// than a guess, and a local error never mentions the network.
func hints(err error) []string {
	var usage *UsageError
	var qe *vast.QueryError
	var pe *preflight.Error
	var ce *lifecycle.CleanupError
	var noRun *NoRunError
	var locked *LockedError
	var damaged *DamagedJournalError
	var pathErr *fs.PathError
	var hinted *hintedError
	var finished *lifecycle.FinishedError
	var needs *NeedsApprovalError
	var missing *container.MissingImageError
	switch {
	case errors.As(err, &hinted):
		return []string{hinted.hint}
	case errors.As(err, &usage) && usage.Hint != "":
		return strings.Split(usage.Hint, "\n") // one fix a line
	case errors.As(err, &pe):
		return pe.Fixes()
	case errors.As(err, &qe):
		return []string{"write queries as the official vast CLI does, e.g. 'gpu_name=RTX_4090 num_gpus>=1 dph<0.5'"}
	case errors.Is(err, vast.ErrNoAPIKey):
		return []string{"or try everything offline first with --sim (an embedded simulator; no money moves)"}
	case errors.Is(err, teamstate.ErrLeaseLost), errors.Is(err, teamstate.ErrFenced):
		// Not ours to clean up any more: a second controller acting on
		// the run is exactly what the lease prevents.
		return []string{"this controller no longer holds the run's lease: the controller that takes the run over (resume on another machine, or reap --team) finishes it, teardown included; 'vastrun runs --all' shows the holder"}
	case errors.As(err, &ce):
		return []string{fmt.Sprintf("destroy them as soon as the API answers: vastrun down --label %s --yes", ce.Label)}
	case errors.As(err, &finished):
		return []string{fmt.Sprintf("a finished run is never run again: start a new one (vastrun %s --yes); read its receipt with: vastrun report %s", finished.Workflow, finished.RunID)}
	case errors.As(err, &missing):
		return []string{fmt.Sprintf("fetch it where its registry can be reached: %s — then run the canary again; or build FROM an image '%s images' lists", missing.PullCommand(), missing.Engine)}
	case errors.As(err, new(*ScopeError)):
		return []string{ciKeyHint}
	case errors.As(err, &needs):
		return []string{fmt.Sprintf("read what %s above, then re-run with --yes", needs.Shown)}
	case errors.Is(err, lifecycle.ErrNeedsApproval):
		return []string{"read the plan above, then re-run with --yes"}
	case errors.Is(err, lifecycle.ErrNoOffer):
		return []string{"see why each offer was rejected: vastrun offers --policy FILE --explain (the -f file, and --sim if you used it)"}
	case errors.Is(err, lifecycle.ErrMutableImage), errors.Is(err, image.ErrMutable):
		return []string{"find the digest with: docker buildx imagetools inspect IMAGE (or crane digest IMAGE)"}
	case errors.Is(err, provider.ErrAuth):
		return []string{"check VAST_API_KEY (or ~/.config/vastai/vast_api_key); Vast answers an unknown key with 404 auth_error", "'vastrun doctor' shows what the key may do"}
	case errors.As(err, &locked):
		if locked.Holder != nil {
			return []string{fmt.Sprintf("wait for pid %d to finish; if it is stuck, stop it (kill %d) and run the command again: the journal lets the next process take over", locked.Holder.PID, locked.Holder.PID)}
		}
		return []string{"another vastrun process drives this run: wait for it to finish, then run the command again"}
	case errors.As(err, &damaged):
		if damaged.Label != "" {
			return []string{fmt.Sprintf("clean up by label, which needs no journal: vastrun down --label %s --yes", damaged.Label)}
		}
		return []string{"clean up by label (it is in the receipt and the CI state): vastrun down --label LABEL --yes"}
	case errors.As(err, &noRun):
		h := []string{fmt.Sprintf("start one with 'vastrun ci', 'vastrun train' or 'vastrun up'; if the runs live elsewhere, pass --state-dir DIR ('vastrun runs' lists what %s holds)", noRun.StateDir)}
		if noRun.Also != "" {
			h = append(h, noRun.Also)
		}
		return h
	case errors.Is(err, syscall.EADDRINUSE):
		return []string{"the port is in use: pick another --listen address (127.0.0.1:0 picks a free one), or stop what listens there"}
	case errors.As(err, &pathErr):
		return []string{fmt.Sprintf("a local file: check that %s exists, is a directory where one is needed, and may be written by vastrun", pathErr.Path)}
	case isTransport(err):
		return []string{"check the network and VAST_URL; vastrun already retried with backoff"}
	}
	return nil
}

// withoutEvidenceErr splits failed evidence uploads off err (the engine
// joins them to the run's error); ok reports whether there were any.
func withoutEvidenceErr(err error) (rest error, ok bool) {
	// The join's own members only, not errors.As: an evidence error
	// wrapped inside the run's own error is part of that error.
	if _, isEv := err.(*lifecycle.EvidenceUploadError); isEv { //nolint:errorlint // see above
		return nil, true
	}
	j, isJoin := err.(interface{ Unwrap() []error })
	if !isJoin {
		return err, false
	}
	var kept []error
	for _, e := range j.Unwrap() {
		if _, isEv := e.(*lifecycle.EvidenceUploadError); isEv { //nolint:errorlint // a member of the join, as above
			ok = true
			continue
		}
		kept = append(kept, e)
	}
	if !ok {
		return err, false
	}
	return errors.Join(kept...), true
}
