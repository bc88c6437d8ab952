package receipt

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/text"
)

// Sections are the workflows' own sections of the receipt. Receipt
// embeds them, so their keys keep their place in receipt.json, and
// renders them through Parts without naming any: a
// receipt read back from disk (`vastrun report`) renders the same way,
// with no workflow at hand to ask.
type Sections struct {
	Train  *TrainReport  `json:"train,omitempty"`
	Canary *CanaryReport `json:"canary,omitempty"`
}

// Part is one workflow section as people read it.
type Part interface {
	// SummaryRows are the section's rows of summary.md's main table.
	SummaryRows() string
	// Story is the section's part of the receipt's story; evidenceDir is
	// where its logs are (already redacted there).
	Story(evidenceDir string) []Section
}

// Parts are the sections a receipt has, in receipt.json's order.
func (s Sections) Parts() []Part {
	var out []Part
	if s.Canary != nil {
		out = append(out, s.Canary)
	}
	if s.Train != nil {
		out = append(out, s.Train)
	}
	return out
}

// Section is one part of a receipt's story for people: a title and rows
// of (key, value), and optionally a block of verbatim text (a log tail).
// The summary renders it as Markdown; the command line aligns it on a
// terminal.
type Section struct {
	Title string
	Rows  [][2]string
	Block string
}

// MDCell makes s safe in a Markdown table cell.
func MDCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "`", "'").Replace(s)
}

// mdValue renders a JSON value in a table cell: as JSON, so "" and null
// and a missing field are told apart.
func mdValue(v any) string {
	if v == nil {
		return "(absent)"
	}
	s := text.Value(v)
	if str, ok := v.(string); ok {
		b, _ := json.Marshal(str) // quoted: "" and a missing field differ
		s = string(b)
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "`" + MDCell(s) + "`"
}

// LogTail is the last n lines of an evidence log, or "".
func LogTail(dir, name string, n int) string {
	if dir == "" || name == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return text.LastLines(string(b), n)
}
