package receipt

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vastrun/vastrun/internal/text"
)

// SummaryRows is the canary part of the Markdown summary (and so of
// `vastrun report`): the comparison, each side's smoke, and the
// field-level diff, so a delta can be read without opening receipt.json.
func (c *CanaryReport) SummaryRows() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| canary | %s |\n", dashIfEmpty(c.Comparison))
	side := func(name string, s *SmokeOutcome) {
		if s == nil {
			return
		}
		fmt.Fprintf(&b, "| %s smoke | %s: %s", name, s.Where, map[bool]string{true: "passed", false: "failed"}[s.Passed])
		if s.Server != nil {
			fmt.Fprintf(&b, "; server ready=%t after %d attempt(s), stopped by %s", s.Server.Ready, s.Server.Attempts, s.Server.Stopped)
			if s.Server.Error != "" {
				fmt.Fprintf(&b, "; %s", MDCell(s.Server.Error))
			}
		} else {
			fmt.Fprintf(&b, "; exit %d", s.ExitCode)
		}
		if s.TimedOut {
			b.WriteString("; timed out")
		}
		if len(s.MissingFields) > 0 {
			fmt.Fprintf(&b, "; missing fields %s", MDCell(strings.Join(s.MissingFields, ", ")))
		}
		b.WriteString(" |\n")
	}
	side("local", &c.Local)
	side("GPU", c.GPU)
	if c.LocalNote != "" {
		fmt.Fprintf(&b, "| local note | %s |\n", MDCell(c.LocalNote))
	}
	for _, ce := range c.CaptureErrors {
		fmt.Fprintf(&b, "| not captured | %s |\n", MDCell(ce))
	}
	if len(c.Delta) > 0 {
		b.WriteString("\n**Fields that differ (local vs GPU):**\n\n| field | local | GPU |\n|---|---|---|\n")
		for _, d := range c.Delta {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", MDCell(d.Field), mdValue(d.Local), mdValue(d.GPU))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Story is the canary's part of the story: the compared fields and their
// values on each side.
func (c *CanaryReport) Story(string) []Section {
	s := Section{Title: "Canary comparison: " + orNone(c.Comparison)}
	fields := map[string]bool{}
	for k := range c.Local.Result {
		fields[k] = true
	}
	if c.GPU != nil {
		for k := range c.GPU.Result {
			fields[k] = true
		}
	}
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		gpu := "—"
		if c.GPU != nil {
			if v, ok := c.GPU.Result[k]; ok {
				gpu = text.Value(v)
			}
		}
		local := "—"
		if v, ok := c.Local.Result[k]; ok {
			local = text.Value(v)
		}
		s.Rows = append(s.Rows, [2]string{k, fmt.Sprintf("cpu %s · gpu %s", local, gpu)})
	}
	if len(s.Rows) == 0 {
		s.Rows = append(s.Rows, [2]string{"fields", "none reported"})
	}
	return []Section{s}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
