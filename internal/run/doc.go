// Package run is vastrun's lifecycle engine: a run is an ordered list of
// idempotent steps (gate, freeze, select, approve, rent, ready, verify,
// work, collect, teardown, receipt) over a journal.
//
// Contracts:
//   - Intent goes to the journal (fsync'd) before every marketplace side
//     effect, and the outcome right after; the instance id also goes to the
//     CI system's durable state the moment it is known.
//   - One label, at most one live contract: an ambiguous create is never
//     retried blindly but reconciled by a complete label listing.
//   - Teardown runs on every path (success, failure, cancellation, panic)
//     on a context detached from the cancelled one, with its own deadline,
//     and is confirmed by id and by a complete label listing. What cannot
//     be confirmed is escalated: a distinct exit code, a webhook alert and a
//     CI annotation naming the instance.
//   - No step sleeps on the wall clock: waits go through clock.Clock.
package run
