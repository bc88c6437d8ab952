package receipt

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/text"
)

// Summary renders a receipt as Markdown for people and CI step summaries.
func Summary(r *Receipt) string {
	var b strings.Builder
	icon := map[bool]string{true: "✅", false: "❌"}[r.Outcome.Succeeded()]
	fmt.Fprintf(&b, "## vastrun %s: %s %s\n\n", r.Workflow, icon, r.Outcome)
	if r.Simulated {
		b.WriteString("> Simulated run: nothing was rented or billed for real.\n\n")
		if r.SimInstance != "" {
			fmt.Fprintf(&b, "> Note: %s.\n\n", r.SimInstance)
		}
	}
	if r.SimTime != nil {
		fmt.Fprintf(&b, "> The simulator ran at %g× speed: timings are wall-clock; simulated ones are under sim_time.\n\n", r.SimTime.Speed)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "**Error:** %s\n\n", r.Error)
	}
	if n := r.Next(); n != "" {
		fmt.Fprintf(&b, "**Next:** %s\n\n", n)
	}
	fmt.Fprintf(&b, "| | |\n|---|---|\n| run | `%s` |\n| label | `%s` |\n| commit | `%s` |\n| image | `%s` |\n", r.RunID, r.Label, r.Commit, r.Image)
	for i, a := range r.Attempts {
		fmt.Fprintf(&b, "| attempt %d | offer %d → instance %d on machine %d: %s x%d at $%.4f/h, cost %s", i+1, a.OfferID, a.InstanceID, a.MachineID, a.GPUName, a.NumGPUs, a.DPHTotal, attemptCost(r, a))
		for _, p := range a.PriceIncreases {
			fmt.Fprintf(&b, "; %s", p.Words())
		}
		if a.Failure != "" {
			fmt.Fprintf(&b, " — ended: %s (%s)", InWords(a.Failure), a.Failure)
		}
		fmt.Fprintf(&b, "; destroyed: %s |\n", map[bool]string{true: "confirmed", false: "**NOT CONFIRMED**"}[a.Confirmed])
	}
	if r.Test != nil {
		fmt.Fprintf(&b, "| test | %s |\n", r.Test.Status())
	}
	charged := "n/a"
	if r.Cost.ChargedUSD != nil {
		charged = fmt.Sprintf("$%.4f", *r.Cost.ChargedUSD)
	}
	fmt.Fprintf(&b, "| cost | estimate $%.4f, charged %s, budget $%.2f |\n", r.Cost.EstimateUSD, charged, r.Cost.MaxSpendUSD)
	fmt.Fprintf(&b, "| cleanup | %s |\n", map[bool]string{true: "all instances confirmed destroyed", false: fmt.Sprintf("**NOT CONFIRMED: %s**", instanceList(r.Cleanup.Unconfirmed))}[r.Cleanup.Confirmed])
	for _, row := range CleanupRows(r.Cleanup) {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	fmt.Fprintf(&b, "| timings | %s |\n", TimingsLine(r.Timings))
	for _, p := range r.Parts() {
		b.WriteString(p.SummaryRows())
	}
	b.WriteString(storyMarkdown(r))
	return b.String()
}

// resultPairs is a workload's JSON result as "key value" pairs in key
// order, each value as people read it (text.Value: no exponent, no Go
// notation for lists and objects).
func resultPairs(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+text.Value(m[k]))
	}
	return strings.Join(parts, ", ")
}

// instanceList is ids as people read them: "30511001, 30511002".
func instanceList(ids []provider.InstanceID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(int64(id), 10)
	}
	return strings.Join(parts, ", ")
}

// TimingsLine is a receipt's timings as people read them: each phase in
// name order with its seconds ("gate 1.2s, rent 3.0s"), as the summary
// and the command line show them.
func TimingsLine(t map[string]float64) string { return sortedPairs(t, "%s %.1fs") }

// sortedPairs renders m's entries in key order with format (key, value),
// joined by ", ".
func sortedPairs[V any](m map[string]V, format string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// CleanupRows are the cleanup's rows beyond its verdict, as people read
// them (summary.md and the terminal): each instance that appeared late
// and was destroyed, and each warning.
func CleanupRows(c Cleanup) [][2]string {
	var rows [][2]string
	for _, id := range c.LateInstanceIDs {
		end := "destroyed, confirmed"
		if slices.Contains(c.Unconfirmed, id) {
			end = "**destruction NOT confirmed**"
		}
		rows = append(rows, [2]string{"late", fmt.Sprintf("instance %d appeared with the run's label after its create was judged not rented (Vast processed the create late): %s", id, end)})
	}
	for _, w := range c.Warnings {
		rows = append(rows, [2]string{"cleanup warning", w})
	}
	return rows
}
