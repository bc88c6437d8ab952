package receipt

import "testing"

func TestOutcomeClasses(t *testing.T) {
	for _, tc := range []struct {
		o         Outcome
		succeeded bool
		class     ExitClass
	}{
		{Passed, true, ClassOK},
		{Match, true, ClassOK},
		{Skipped, true, ClassOK},
		{Untrusted, true, ClassOK}, // the HTML report once called this a failure
		{Up, true, ClassOK},
		{Down, true, ClassOK},
		{Failed, false, ClassTestFailed},
		{Gated, false, ClassTestFailed},
		{LocalFailed, false, ClassTestFailed},
		{OutputDelta, false, ClassTestFailed},
		{GPUOnlyFailure, false, ClassTestFailed},
		{NotApproved, false, ClassNeedsApproval},
		{Cancelled, false, ClassCancelled},
		{NoOffer, false, ClassNoOffer},
		{Budget, false, ClassBudget},
		{ReadyFailed, false, ClassProvision},
		{VerifyFailed, false, ClassProvision},
		{RemoteDiffers, false, ClassProvision},
		{Interrupted, false, ClassInterrupted},
		{Timeout, false, ClassError},
		{Error, false, ClassError},
		{"from_a_newer_version", false, ClassError},
		{"", false, ClassError},
	} {
		if got := tc.o.Succeeded(); got != tc.succeeded {
			t.Errorf("%q.Succeeded() = %v, want %v", tc.o, got, tc.succeeded)
		}
		if got := tc.o.ExitClass(); got != tc.class {
			t.Errorf("%q.ExitClass() = %q, want %q", tc.o, got, tc.class)
		}
	}
	if Outcome("from_a_newer_version").Known() || !Passed.Known() {
		t.Error("Known")
	}
}
