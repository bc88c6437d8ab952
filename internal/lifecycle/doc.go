// Package lifecycle is vastrun's lifecycle core: a run is an ordered list of
// idempotent steps (gate, paths, freeze, select, approve, rent, ready,
// connect, verify, then the workflow's own, then teardown and receipt)
// over a journal, reading the run's frozen spec (internal/spec), never the
// configuration after the draft is built.
//
// The core names no workflow. A workflow (internal/workflow/ci, canary,
// train) implements [Workflow] — its spec sections, job bound, local step,
// outcome mapping and receipt section — and drives a run through
// [Engine.Drive] and [Engine.Resume] (one verified instance, then its
// Body) or [Engine.Manage] (a workflow that attaches and replaces
// instances itself), doing its own work through the small API in core.go.
// The receipt is one versioned document: its workflow sections' types and
// their rendering live with its schema (internal/receipt, embedded as
// receipt.Sections); each workflow fills its own through Workflow.Section.
//
// Contracts:
//   - Intent goes to the journal (fsync'd) before every marketplace side
//     effect, and the outcome right after; the instance id also goes to the
//     CI system's durable state the moment it is known.
//   - One label, at most one live contract: an ambiguous create is never
//     retried blindly but reconciled by a complete label listing.
//   - Teardown runs on every path (success, failure, cancellation, panic)
//     on a context detached from the cancelled one, with its own deadline.
//     It destroys every instance the journal knows, confirmed by id, before
//     it lists the label at all; one label sweep then looks for what the
//     journal did not know, and a complete listing adds its evidence. A
//     label left possibly live by a create judged not rented is watched
//     until Vast's slowest create could have landed. What cannot be
//     confirmed is escalated: a distinct exit code, a webhook alert and a
//     CI annotation naming the instance; what could not be checked while
//     everything known is gone is a warning in the receipt.
//   - An instance that stops between "running" and its first SSH answer is
//     seen between dials (the API is asked) and replaced at once.
//   - Readiness: the API is the authority on an instance's state; while
//     one boots with its SSH address published, its SSH is also dialled
//     every probeEvery, so the API is asked the moment the sshd answers.
//     Each rental's ready deadline is timeouts.ready plus its image's pull
//     expected on its host (the frozen image_bytes over inet_down), and a
//     pull whose status stops changing for timeouts.pull_stall is stopped
//     and replaced.
//   - Many instances (down, reap) are destroyed in bulk and confirmed by a
//     complete listing of their labels, a read by id only for what it still
//     shows (DestroyConfirmAll, SweepLabel).
//   - The outcome is the run's terminal record and carries its receipt,
//     journaled before receipt.json; a run whose journal holds it is
//     finished and never run again (finished.go).
//   - No step sleeps on the wall clock: waits go through clock.Clock.
package lifecycle
