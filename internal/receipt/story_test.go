package receipt

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStoryCILogTailOnlyOnFailure(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	for i := 1; i <= 30; i++ {
		log.WriteString("line " + strings.Repeat("x", i%3) + "\n")
	}
	log.WriteString("the last line\n")
	os.WriteFile(filepath.Join(dir, "test.log"), []byte(log.String()), 0o644)
	r := &Receipt{Workflow: "ci", Outcome: Failed, EvidenceDir: dir, Test: &TestOutcome{ExitCode: ptr(1), Log: "test.log"},
		Verify: &VerifyReport{Checks: []Check{{Name: "gpu count", OK: true, Detail: "1 GPU"}, {Name: "cuda", OK: false, Detail: "11.8 < 12.0"}}}}
	var tail *Section
	for _, s := range Story(r) {
		if strings.HasPrefix(s.Title, "Last lines of test.log") {
			s := s
			tail = &s
		}
	}
	if tail == nil || strings.Count(tail.Block, "\n")+1 != 20 || !strings.HasSuffix(tail.Block, "the last line") {
		t.Fatalf("tail: %+v", tail)
	}
	if md := Summary(r); !strings.Contains(md, "| cuda | FAILED — 11.8 < 12.0 |") {
		t.Fatalf("verify checks missing:\n%s", md)
	}
	r.Outcome, r.Test.ExitCode = Passed, ptr(0)
	for _, s := range Story(r) {
		if strings.HasPrefix(s.Title, "Last lines") {
			t.Fatal("a passing test's log tail is shown")
		}
	}
}

func TestInWords(t *testing.T) {
	for reason, want := range map[string]string{
		"paused (cur/intended/next state stopped): outbid or stopped actual_status stopped": "the host stopped the instance (outbid or preempted)",
		"instance vanished": "the instance disappeared from the marketplace",
		"something new":     "something new",
	} {
		if got := InWords(reason); got != want {
			t.Errorf("InWords(%q) = %q, want %q", reason, got, want)
		}
	}
}

func TestTimingsLineIsInNameOrder(t *testing.T) {
	if got, want := TimingsLine(map[string]float64{"rent": 3, "gate": 1.25, "elapsed": 10}), "elapsed 10.0s, gate 1.2s, rent 3.0s"; got != want {
		t.Fatalf("TimingsLine = %q, want %q", got, want)
	}
	if got := TimingsLine(nil); got != "" {
		t.Fatalf("TimingsLine(nil) = %q, want empty", got)
	}
}

func ptr(n int) *int { return &n }

// TestInterruptedTestHasNoExitCode: a test that did not end on its own has
// no exit_code in the JSON and never reads as exit 0 or a pass.
func TestInterruptedTestHasNoExitCode(t *testing.T) {
	for _, c := range []struct {
		t    TestOutcome
		want string
	}{
		{TestOutcome{Interrupted: true}, "interrupted"},
		{TestOutcome{TimedOut: true}, "timed out"},
		{TestOutcome{ExitCode: ptr(0)}, "exit 0"},
		{TestOutcome{ExitCode: ptr(137), Signal: "KILL"}, "exit 137 (signal KILL)"},
	} {
		b, _ := json.Marshal(c.t)
		if got := c.t.Status(); got != c.want {
			t.Errorf("%s: Status %q, want %q", b, got, c.want)
		}
		if has := strings.Contains(string(b), "exit_code"); has != (c.t.ExitCode != nil) {
			t.Errorf("%s: exit_code present %v", b, has)
		}
		if c.t.Passed() != (c.want == "exit 0") {
			t.Errorf("%s: Passed %v", b, c.t.Passed())
		}
	}
}
