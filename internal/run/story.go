package run

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Section is one part of a receipt's story for people: a title and rows
// of (key, value), and optionally a block of verbatim text (a log tail).
// Summary renders it as Markdown; the command line aligns it on a terminal.
type Section struct {
	Title string
	Rows  [][2]string
	Block string
}

// Story is what a person needs from a receipt beyond its facts, per
// workflow: ci — the verify checks and, on failure, the last 20 lines of
// the test log; canary — the compared fields and their values; train —
// each attempt with its cost and how it ended, the resume, the last
// committed checkpoint and the final metrics. Logs are read from the
// receipt's evidence directory (already redacted there).
func Story(r *Receipt) []Section {
	var out []Section
	if len(r.Attempts) > 0 {
		s := Section{Title: "Attempts"}
		for i, a := range r.Attempts {
			v := fmt.Sprintf("%s x%d, instance %d, $%.4f/h, cost %s", a.GPUName, a.NumGPUs, a.InstanceID, a.DPHTotal, attemptCost(r, a))
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
	if t := r.Test; t != nil && (t.ExitCode != 0 || t.TimedOut) {
		if tail := logTail(r.EvidenceDir, t.Log, 20); tail != "" {
			out = append(out, Section{Title: fmt.Sprintf("Last lines of %s (exit %d)", t.Log, t.ExitCode), Block: tail})
		}
	}
	if c := r.Canary; c != nil {
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
					gpu = fmt.Sprint(v)
				}
			}
			local := "—"
			if v, ok := c.Local.Result[k]; ok {
				local = fmt.Sprint(v)
			}
			s.Rows = append(s.Rows, [2]string{k, fmt.Sprintf("cpu %s · gpu %s", local, gpu)})
		}
		if len(s.Rows) == 0 {
			s.Rows = append(s.Rows, [2]string{"fields", "none reported"})
		}
		out = append(out, s)
	}
	if t := r.Train; t != nil {
		s := Section{Title: "Training"}
		for _, rs := range t.Resumes {
			v := fmt.Sprintf("restored step %d on instance %d", rs.RestoredStep, rs.Instance)
			switch {
			case rs.Proven:
				v += fmt.Sprintf("; the workload reported resuming from %d (proven)", rs.RestoredStep)
			case rs.ReportedStep != nil:
				v += fmt.Sprintf("; the workload reported %d (NOT proven)", *rs.ReportedStep)
			default:
				v += "; the workload reported nothing (NOT proven)"
			}
			s.Rows = append(s.Rows, [2]string{"resumed", v})
		}
		if c := t.LastCheckpoint; c != nil {
			s.Rows = append(s.Rows, [2]string{"last committed", fmt.Sprintf("step %d, manifest sha256 %s", c.Step, c.ManifestSHA256)})
		} else {
			s.Rows = append(s.Rows, [2]string{"last committed", "no checkpoint"})
		}
		if len(t.Result) > 0 {
			var keys []string
			for k := range t.Result {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %v", k, t.Result[k]))
			}
			s.Rows = append(s.Rows, [2]string{"final metrics", strings.Join(parts, ", ")})
		}
		if t.ExitCode != nil && *t.ExitCode != 0 {
			if tail := logTail(r.EvidenceDir, "train.log", 20); tail != "" {
				out = append(out, s, Section{Title: fmt.Sprintf("Last lines of train.log (exit %d)", *t.ExitCode), Block: tail})
				return out
			}
		}
		out = append(out, s)
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

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// logTail is the last n lines of an evidence log, or "".
func logTail(dir, name string, n int) string {
	if dir == "" || name == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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
				fmt.Fprintf(&b, "| %s | %s |\n", mdCell(row[0]), mdCell(row[1]))
			}
		}
		if s.Block != "" {
			fmt.Fprintf(&b, "```\n%s\n```\n", strings.ReplaceAll(s.Block, "```", "'''"))
		}
	}
	return b.String()
}
