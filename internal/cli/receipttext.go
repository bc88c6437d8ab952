package cli

import (
	"fmt"
	"io"
	"strings"

	"charm.land/lipgloss/v2"

	"github.com/vastrun/vastrun/internal/receipt"
)

// writeReceiptText renders a receipt for a terminal: aligned "key  value"
// lines under plain headings instead of Markdown table syntax (which is
// what CI summaries and summary.md get). It is built in memory, where a
// write cannot fail; its caller writes it out.
func writeReceiptText(w *strings.Builder, r *receipt.Receipt, color bool) error {
	bold, good, bad := lipgloss.NewStyle(), lipgloss.NewStyle(), lipgloss.NewStyle()
	if color {
		bold = bold.Bold(true)
		good = good.Foreground(lipgloss.Color("2")).Bold(true)
		bad = bad.Foreground(lipgloss.Color("1")).Bold(true)
	}
	mark := bad.Render("✗ " + string(r.Outcome))
	if r.Outcome.Succeeded() {
		mark = good.Render("✓ " + string(r.Outcome))
	}
	fmt.Fprintf(w, "\n%s %s\n", bold.Render("vastrun "+r.Workflow+":"), mark)
	if r.Simulated {
		fmt.Fprintln(w, "simulated: nothing was rented or billed for real")
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	if n := r.Next(); n != "" {
		fmt.Fprintf(w, "next: %s\n", n)
	}
	var tw strings.Builder
	row := func(k, v string) { fmt.Fprintf(&tw, "  %s\t%s\n", k, v) }
	row("run", r.RunID)
	row("label", r.Label)
	row("commit", r.Commit)
	row("image", r.Image)
	charged := "n/a"
	if r.Cost.ChargedUSD != nil {
		charged = fmt.Sprintf("$%.4f", *r.Cost.ChargedUSD)
	}
	row("cost", fmt.Sprintf("estimate $%.4f, charged %s, budget $%.2f", r.Cost.EstimateUSD, charged, r.Cost.MaxSpendUSD))
	if r.Cleanup.Confirmed {
		row("cleanup", "all instances confirmed destroyed")
	} else {
		row("cleanup", bad.Render(fmt.Sprintf("NOT CONFIRMED: %v", r.Cleanup.Unconfirmed)))
	}
	for _, cr := range receipt.CleanupRows(r.Cleanup) {
		row(cr[0], cr[1])
	}
	if r.Test != nil {
		row("test", r.Test.Status())
	}
	row("timings", receipt.TimingsLine(r.Timings))
	if err := writeTable(w, tw.String()); err != nil {
		return err
	}
	for _, s := range receipt.Story(r) {
		fmt.Fprintf(w, "\n%s\n", bold.Render(s.Title))
		var tw strings.Builder
		for _, rr := range s.Rows {
			fmt.Fprintf(&tw, "  %s\t%s\n", rr[0], rr[1])
		}
		if err := writeTable(w, tw.String()); err != nil {
			return err
		}
		if s.Block != "" {
			for _, l := range strings.Split(s.Block, "\n") {
				fmt.Fprintf(w, "  │ %s\n", l)
			}
		}
	}
	return nil
}

// writeSummary prints the receipt for people on stdout: aligned text on a
// terminal, Markdown otherwise (a file, a pipe, a CI log), redacted.
func writeSummary(f *Factory, r *receipt.Receipt) error {
	red := f.IO.Redactor()
	if f.IO.OutTTY {
		var b strings.Builder
		if err := writeReceiptText(&b, r, f.Getenv("NO_COLOR") == "" && f.Getenv("TERM") != "dumb"); err != nil {
			return err
		}
		_, err := io.WriteString(f.IO.Out, red.String(b.String()))
		return err
	}
	_, err := io.WriteString(f.IO.Out, red.String(receipt.Summary(r)))
	return err
}
