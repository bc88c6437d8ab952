package ci

import (
	"slices"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
)

func names(f lifecycle.Flow) []string {
	var out []string
	for _, s := range f.Steps {
		out = append(out, s.Name())
	}
	return out
}

// ci is the local steps, one verified instance armed with its dead-man
// switch, the upload and the test,
// with the plain defaults (drop other sections, approve the whole job
// timeout, the shared outcome); its receipt section is the test's
// outcome. up is the same without the test, keeping its rental.
func TestFlowComposition(t *testing.T) {
	f := Flow()
	if want := []string{"gate", "paths", "checks", "freeze", "provision", "deadman", "upload", "test"}; !slices.Equal(names(f), want) {
		t.Fatalf("ci steps %v, want %v", names(f), want)
	}
	if f.Name != Name || f.Keep || f.Spec != nil || f.JobBound != nil || f.Outcome != nil {
		t.Fatalf("ci flow overrides a default: %+v", f)
	}
	var r receipt.Receipt
	f.Section(&r)
	if r.Test != nil {
		t.Fatalf("section before the test ran: %+v", r.Test)
	}
	u := UpFlow()
	if want := []string{"gate", "paths", "checks", "freeze", "provision", "deadman", "upload"}; !slices.Equal(names(u), want) || !u.Keep || u.Name != "up" {
		t.Fatalf("up flow %v keep=%v", names(u), u.Keep)
	}
}
