package cli

import (
	"testing"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

// --price-increase PRICE@AFTER[/TERM] is the simulator's price_increase
// fault for the next instance to run; a bad one is a usage error with
// the form in the hint.
func TestSimServePriceIncrease(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want sim.Fault
	}{
		{"2.5@90s/10m", sim.Fault{Kind: sim.FaultPriceIncrease, Price: 2.5, Seconds: 90, For: 600, Count: 1}},
		{"1@0s", sim.Fault{Kind: sim.FaultPriceIncrease, Price: 1, Count: 1}},
	} {
		if got, err := ParsePriceIncrease(tc.in); err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"2.5", "x@90s", "-1@90s", "2@soon", "2@90s/ever", "2@-5s"} {
		if _, err := ParsePriceIncrease(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	o, err := parse(NewCmdSimServe, opsFactory(), "--price-increase", "2.5@90s/10m")
	if err != nil || o.PriceIncrease != "2.5@90s/10m" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = parse(NewCmdSimServe, opsFactory(), "--price-increase", "2.5")
	badInput(t, o, err, `--price-increase "2.5": want PRICE@AFTER`, `PRICE@AFTER\[/TERM\]`)
}
