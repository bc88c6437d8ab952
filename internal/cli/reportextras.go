package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
)

// reportExtras reads what the HTML report adds from the evidence: the
// workload's metrics and the last lines of its log.
func reportExtras(r *receipt.Receipt) report.Extras {
	var x report.Extras
	if r.EvidenceDir == "" {
		return x
	}
	if f, err := os.Open(filepath.Join(r.EvidenceDir, receipt.MetricsFile)); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m != nil {
				x.Metrics = append(x.Metrics, m)
			}
		}
		f.Close()
	}
	if logs := report.LogFiles(r.EvidenceDir); len(logs) > 0 {
		p := logs[len(logs)-1]
		if b, err := os.ReadFile(p); err == nil {
			x.LogName, x.LogTail = filepath.Base(p), lastN(string(b), 20)
		}
	}
	return x
}

// lastN is the last n lines of s.
func lastN(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
