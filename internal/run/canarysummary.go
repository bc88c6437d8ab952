package run

import (
	"encoding/json"
	"fmt"
	"strings"
)

// canarySummary is the canary part of the Markdown summary (and so of
// `vastrun report`): the comparison, each side's smoke, and the
// field-level diff, so a delta can be read without opening receipt.json.
func canarySummary(c *CanaryReport) string {
	if c == nil {
		return ""
	}
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
				fmt.Fprintf(&b, "; %s", mdCell(s.Server.Error))
			}
		} else {
			fmt.Fprintf(&b, "; exit %d", s.ExitCode)
		}
		if s.TimedOut {
			b.WriteString("; timed out")
		}
		if len(s.MissingFields) > 0 {
			fmt.Fprintf(&b, "; missing fields %s", mdCell(strings.Join(s.MissingFields, ", ")))
		}
		b.WriteString(" |\n")
	}
	side("local", &c.Local)
	side("GPU", c.GPU)
	if c.LocalNote != "" {
		fmt.Fprintf(&b, "| local note | %s |\n", mdCell(c.LocalNote))
	}
	for _, ce := range c.CaptureErrors {
		fmt.Fprintf(&b, "| not captured | %s |\n", mdCell(ce))
	}
	if len(c.Delta) > 0 {
		b.WriteString("\n**Fields that differ (local vs GPU):**\n\n| field | local | GPU |\n|---|---|---|\n")
		for _, d := range c.Delta {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", mdCell(d.Field), mdValue(d.Local), mdValue(d.GPU))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// mdValue renders a JSON value in a table cell: as JSON, so "" and null
// and a missing field are told apart.
func mdValue(v any) string {
	if v == nil {
		return "(absent)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return mdCell(fmt.Sprint(v))
	}
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "`" + mdCell(s) + "`"
}

func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "`", "'").Replace(s)
}
