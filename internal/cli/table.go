package cli

import (
	"io"
	"text/tabwriter"
)

// writeTable writes text, lines of tab-separated cells, to w with its
// columns aligned (two blanks between them). The text is built first (in a
// strings.Builder, whose writes cannot fail), so that the one write that
// can fail, to w, is checked here.
func writeTable(w io.Writer, text string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if _, err := io.WriteString(tw, text); err != nil {
		return err
	}
	return tw.Flush()
}
