// Package report reads runs back from a state directory and shows them to
// people and scripts: the listing of `vastrun runs` (List, LiveRuns), a
// run's receipt, evidence and logs as they were left (Receipt, LogFiles),
// and the HTML report of `vastrun report`.
//
// The listing only reads. Journals are replayed without taking their
// lock, receipts are read when the run wrote one, and a damaged run is
// listed with its error instead of hiding the others. Rows come newest
// first; figures are rounded (seconds to 0.1, dollars to 1e-4) because
// they are for reading, and the receipt keeps the exact ones.
//
// The report renders a run's receipt and journal as one
// self-contained HTML page (no network: inline CSS and SVG) that reads at a
// glance — the total cost and outcome in the header; a timeline per
// attempt on a labelled time axis with named checkpoint, interruption and
// resume markers; the workload's metric over steps across attempts with the
// resume point; spend over time on a dollar axis with each attempt's cost
// and the budget; and, per workflow, the verify checks and the test log's
// tail (ci), the compared fields (canary) or the training story (train).
//
// Contract: [Build] only reads what it is given (the receipt, the journal,
// and optional [Extras] from the evidence); the page refers to nothing
// outside itself and scales to the window (SVGs use a viewBox at 100 %
// width). Attempts are numbered from 1 everywhere.
package report
