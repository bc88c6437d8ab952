package receipt

import (
	"fmt"
	"strings"
	"time"
)

// Story is what a person needs from a receipt beyond its facts: each
// attempt with its cost and how it ended, the verify checks and, on a
// failed test, the last 20 lines of its log; then each workflow section's
// own part (Part), which the core renders without naming it. Logs
// are read from the receipt's evidence directory (already redacted there).
func Story(r *Receipt) []Section {
	var out []Section
	if len(r.Attempts) > 0 {
		s := Section{Title: "Attempts"}
		for i, a := range r.Attempts {
			v := fmt.Sprintf("%s x%d, instance %d, $%.4f/h, cost %s", a.GPUName, a.NumGPUs, a.InstanceID, a.DPHTotal, attemptCost(r, a))
			for _, p := range a.PriceIncreases {
				v += "; " + p.Words()
			}
			if w := InWords(a.Failure); w != "" {
				v += "; ended: " + w
			}
			s.Rows = append(s.Rows, [2]string{fmt.Sprintf("attempt %d", i+1), v})
		}
		out = append(out, s)
	}
	if v := r.Verify; v != nil && len(v.Checks) > 0 {
		s := Section{Title: "Verify checks"}
		for _, c := range v.Checks {
			mark := "ok"
			if !c.OK {
				mark = "FAILED"
			}
			s.Rows = append(s.Rows, [2]string{c.Name, mark + " — " + c.Detail})
		}
		out = append(out, s)
	}
	if t := r.Test; t != nil && !t.Passed() {
		if tail := LogTail(r.EvidenceDir, t.Log, 20); tail != "" {
			out = append(out, Section{Title: fmt.Sprintf("Last lines of %s (%s)", t.Log, t.Status()), Block: tail})
		}
	}
	for _, p := range r.Parts() {
		out = append(out, p.Story(r.EvidenceDir)...)
	}
	return out
}

// attemptCost is what one attempt cost: charged when known, else its
// rented time at its $/h (in simulated time for a scaled simulator).
func attemptCost(r *Receipt, a *Attempt) string {
	if a.Charged != nil {
		return fmt.Sprintf("$%.4f", *a.Charged)
	}
	if a.RentedAt.IsZero() {
		return "$0.0000"
	}
	end := a.ConfirmedAt
	if end.IsZero() {
		end = r.FinishedAt
	}
	d := end.Sub(a.RentedAt)
	if r.SimTime != nil && r.SimTime.Speed > 0 {
		d = time.Duration(float64(d) * r.SimTime.Speed)
	}
	return fmt.Sprintf("~$%.4f", a.DPHTotal*max(0, d.Hours()))
}

// storyMarkdown renders the story for Summary.
func storyMarkdown(r *Receipt) string {
	var b strings.Builder
	for _, s := range Story(r) {
		if s.Title == "Attempts" {
			continue // the table above has them
		}
		fmt.Fprintf(&b, "\n### %s\n\n", s.Title)
		if len(s.Rows) > 0 {
			b.WriteString("| | |\n|---|---|\n")
			for _, row := range s.Rows {
				fmt.Fprintf(&b, "| %s | %s |\n", MDCell(row[0]), MDCell(row[1]))
			}
		}
		if s.Block != "" {
			fmt.Fprintf(&b, "```\n%s\n```\n", strings.ReplaceAll(s.Block, "```", "'''"))
		}
	}
	return b.String()
}
