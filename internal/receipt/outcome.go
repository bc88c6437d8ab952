// Package receipt holds what a finished run reports about itself. Its
// Outcome type answers, in one place, whether a run succeeded and which
// class of exit it maps to; the engine, the Markdown summary, the HTML
// report and the CLI's exit codes all ask it rather than keeping lists.
//
// It is also the schema of the workflows' own sections of receipt.json
// (docs/receipt.md): Sections (train, canary), the types they are made of,
// and how each renders for people (Part: its rows of summary.md and its
// part of the story). The lifecycle core embeds Sections in its Receipt
// and renders them through Part without naming any; each workflow fills
// its own. A section's JSON is a contract, so its types live with the
// document rather than in the workflow that fills them, and a receipt read
// back from disk renders with no workflow at hand.
//
// receipt imports nothing of vastrun's run engine (only the leaf packages
// whose types its sections carry): the report and ci packages can depend
// on it without depending on the lifecycle.
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
	Timeout:     ClassError, Error: ClassError,
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
