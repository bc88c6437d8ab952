package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
	"github.com/vastrun/vastrun/internal/text"
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
		_ = f.Close() // only read
	}
	if logs := report.LogFiles(r.EvidenceDir); len(logs) > 0 {
		p := logs[len(logs)-1]
		if b, err := os.ReadFile(p); err == nil {
			x.LogName, x.LogTail = filepath.Base(p), text.LastLines(string(b), 20)
		}
	}
	return x
}
