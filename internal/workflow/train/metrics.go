package train

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
)

// askAgentLogs is one status request that also brings back the log and
// the metrics from where this attempt's collection stands.
func (e *flow) askAgentLogs(ctx context.Context, c *remote.Client, inst provider.InstanceID, l *attemptLog) (agent.Report, error) {
	r, err := e.agentOn(c, inst).Status(ctx, agent.StatusRequest{LogOffset: l.offset, LogMax: logChunk, MetricsOffset: l.metrics})
	return r, agentErr(err)
}

// addMetrics appends the chunk's complete lines to the evidence (redacted,
// tagged with the attempt) and tells the Observer the workload's step and
// total. A line that is not a JSON object is skipped: metrics are data,
// and free text belongs in the log.
func (l *attemptLog) addMetrics(s *lifecycle.Scope, ch *agent.LogChunk) {
	if ch == nil || ch.Offset != l.metrics || len(ch.Data) == 0 {
		return
	}
	data := string(ch.Data)
	i := strings.LastIndexByte(data, '\n')
	if i < 0 {
		return // wait for the line's end
	}
	data = data[:i+1]
	l.metrics += int64(len(data))
	var out strings.Builder
	var step, total int64
	for _, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m == nil {
			continue
		}
		if l.skipMetrics > 0 { // recorded before this controller re-attached
			l.skipMetrics--
			continue
		}
		m["attempt"] = l.attempt
		if v, ok := m["step"].(float64); ok {
			step = int64(v)
		}
		for _, k := range []string{"total_steps", "total"} {
			if v, ok := m[k].(float64); ok {
				total = int64(v)
			}
		}
		b, _ := json.Marshal(m)
		out.Write(s.Redactor.JSON(b)) // each line stays one JSON object
		out.WriteByte('\n')
	}
	if out.Len() == 0 {
		return
	}
	// The evidence directory is the attempt log's (attemptLogFor).
	if f, err := s.Sink().Append(filepath.Join(s.EvidenceDir, receipt.MetricsFile), 0o644); err == nil {
		f.Write([]byte(out.String())) //nolint:errcheck // evidence beside the receipt, best effort: the run's progress does not hang on it
		f.Close()                     //nolint:errcheck // as the write above
	}
	if step > 0 {
		s.ObserveSteps(step, total)
	}
}

// recordedMetrics counts the lines metrics.jsonl already holds from
// attempt: addMetrics writes exactly one line per JSON object of the
// instance's file, in order, so a controller that re-attaches to the same
// instance (and reads that file from its start again) skips this many
// instead of recording them twice.
func recordedMetrics(evidenceDir string, attempt int) int {
	f, err := os.Open(filepath.Join(evidenceDir, receipt.MetricsFile))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }() // only read: a failed close loses nothing
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 2*logChunk)
	for sc.Scan() {
		var m struct {
			Attempt *int `json:"attempt"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Attempt != nil && *m.Attempt == attempt {
			n++
		}
	}
	return n
}
