package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
)

// A controller that re-attaches reads the instance's metrics file from its
// start again; what the evidence already holds from that attempt is not
// recorded twice, and what is new is. Another attempt's lines (another
// instance, another file) do not count.
func TestReattachDoesNotDuplicateMetrics(t *testing.T) {
	ev := t.TempDir()
	e := newFlow(lifecycle.New(&lifecycle.Deps{EvidenceDir: ev, Redactor: redact.New()}))
	remote := `{"step":100,"loss":0.5}` + "\n" + "not json\n" + `{"step":200,"loss":0.4}` + "\n"

	l := e.attemptLogFor(1)
	l.addMetrics(e.s, &agent.LogChunk{Offset: 0, Data: []byte(remote)})
	l2 := e.attemptLogFor(2)
	l2.addMetrics(e.s, &agent.LogChunk{Offset: 0, Data: []byte(`{"step":100,"loss":0.9}` + "\n")})

	// Attempt 2's controller dies and a new one re-attaches to instance 2,
	// after the workload wrote one more line.
	e2 := newFlow(lifecycle.New(&lifecycle.Deps{EvidenceDir: ev, Redactor: redact.New()}))
	l3 := e2.attemptLogFor(2)
	if l3.skipMetrics != 1 {
		t.Fatalf("the re-attached controller would skip %d lines of attempt 2, want 1", l3.skipMetrics)
	}
	l3.addMetrics(e2.s, &agent.LogChunk{Offset: 0, Data: []byte(`{"step":100,"loss":0.9}` + "\n" + `{"step":200,"loss":0.8}` + "\n")})

	b, err := os.ReadFile(filepath.Join(ev, receipt.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"attempt":1,"loss":0.5,"step":100}` + "\n" + `{"attempt":1,"loss":0.4,"step":200}` + "\n" +
		`{"attempt":2,"loss":0.9,"step":100}` + "\n" + `{"attempt":2,"loss":0.8,"step":200}` + "\n"
	if string(b) != want {
		t.Fatalf("metrics.jsonl after a re-attach:\n%s\nwant each line once:\n%s", b, want)
	}
	if n := strings.Count(string(b), `"step":100`); n != 2 {
		t.Fatalf("step 100 recorded %d times, want once per attempt", n)
	}
}
