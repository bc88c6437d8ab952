// Package receipt is the schema of receipt.json (docs/receipt.md), a
// public contract, and how a receipt renders for people: Receipt and the
// types it is made of, the Markdown summary (Summary), the story
// (Story), the offer verdicts of selection.json (DecisionRows). The
// lifecycle builds a receipt at a run's end; `vastrun report`, `runs` and
// the CLI read it back from disk, so they depend on this package and not
// on the lifecycle.
//
// Its Outcome type answers, in one place, whether a run succeeded and
// which class of exit it maps to; the engine, the Markdown summary, the
// HTML report and the CLI's exit codes all ask it rather than keeping
// lists. The workflows' own sections (Sections: train, canary) live here
// too, with how each renders (Part: its rows of summary.md and its part
// of the story); Receipt embeds them and renders them without naming
// any, and each workflow fills its own.
//
// receipt imports nothing of vastrun's run engine (only the leaf packages
// whose types it carries: provider, policy, checkpoint, smoke; and text).
package receipt

// Outcome is how a run ended, as the journal and receipt.json name it.
// The string values are part of the receipt's JSON contract.
type Outcome string

// Outcomes of the lifecycle and of each workflow.
const (
	Passed        Outcome = "passed"
	Failed        Outcome = "failed"
	Gated         Outcome = "gated"
	Skipped       Outcome = "skipped"
	Untrusted     Outcome = "skipped_untrusted"
	NoOffer       Outcome = "no_offer"
	NotApproved   Outcome = "not_approved"
	ReadyFailed   Outcome = "ready_failed"
	VerifyFailed  Outcome = "verify_failed"
	RemoteDiffers Outcome = "remote_bytes_differ"
	Interrupted   Outcome = "interrupted"
	Timeout       Outcome = "timeout"
	Error         Outcome = "error"
	Up            Outcome = "up"
	Down          Outcome = "down"
	Budget        Outcome = "budget_exceeded"
	// Cancelled: the person answered no at the prompt; nothing was rented.
	Cancelled Outcome = "cancelled"
	// ContractEnded: the rental's contract ended (its host's end date, or
	// a price increase above the ceiling not accepted) before the work was
	// done; the work was stopped before it ended.
	ContractEnded Outcome = "contract_ended"
	// Unfinished: the journal has no outcome; its controller is still
	// running, or died (a receipt rebuilt from the journal says so).
	Unfinished Outcome = "unfinished"

	// The canary's comparison classes.
	Match            Outcome = "match"
	GPUOnlyFailure   Outcome = "gpu_only_failure"
	LocalOnlyFailure Outcome = "local_only_failure"
	BothFailed       Outcome = "both_failed"
	OutputDelta      Outcome = "output_delta"
	LocalFailed      Outcome = "local_failed"
)

// ExitClass is the class of exit an outcome maps to. internal/cli maps each
// class to its documented exit code (docs/exit-codes.md).
type ExitClass string

// Exit classes.
const (
	ClassOK            ExitClass = "ok"
	ClassTestFailed    ExitClass = "test_failed"    // the workload (or the local gate/contract) ran and failed
	ClassNeedsApproval ExitClass = "needs_approval" // renting needed a yes that was not given
	ClassNoOffer       ExitClass = "no_offer"
	ClassBudget        ExitClass = "budget"
	ClassProvision     ExitClass = "provision" // the rental never became a verified, reachable instance
	ClassInterrupted   ExitClass = "interrupted"
	ClassCancelled     ExitClass = "cancelled" // a no at the prompt: a choice, not a failure
	ClassError         ExitClass = "error"     // anything else, an unknown outcome included
)

var classes = map[Outcome]ExitClass{
	Passed: ClassOK, Skipped: ClassOK, Untrusted: ClassOK, Up: ClassOK, Down: ClassOK, Match: ClassOK,
	Failed: ClassTestFailed, Gated: ClassTestFailed, LocalFailed: ClassTestFailed,
	GPUOnlyFailure: ClassTestFailed, LocalOnlyFailure: ClassTestFailed, BothFailed: ClassTestFailed, OutputDelta: ClassTestFailed,
	NotApproved: ClassNeedsApproval,
	Cancelled:   ClassCancelled,
	NoOffer:     ClassNoOffer,
	Budget:      ClassBudget,
	ReadyFailed: ClassProvision, VerifyFailed: ClassProvision, RemoteDiffers: ClassProvision,
	Interrupted: ClassInterrupted,
	Timeout:     ClassError, Error: ClassError, ContractEnded: ClassError,
}

// ExitClass is the class of exit o maps to; ClassError for an outcome this
// version does not know.
func (o Outcome) ExitClass() ExitClass {
	if c, ok := classes[o]; ok {
		return c
	}
	return ClassError
}

// Succeeded reports whether o is a run that did what was asked: the work
// passed, the canary matched, the instance is up or down as asked, or the
// GPU step was skipped on purpose (paths untouched, an untrusted event).
func (o Outcome) Succeeded() bool { return o.ExitClass() == ClassOK }

// Known reports whether o is an outcome this version defines.
func (o Outcome) Known() bool {
	_, ok := classes[o]
	return ok
}

// Resumable reports an outcome whose run `vastrun resume` continues: a run
// interrupted by a signal, or one whose controller died.
func (o Outcome) Resumable() bool { return o == Interrupted || o == Unfinished }
