package team_test

import (
	"testing"

	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// --mine keeps runs held (or last held) by this user on this host, whatever
// process or lease id held them: a run stays mine after its controller died.
func TestHeldFrom(t *testing.T) {
	row := func(id, host, user string, pid int) team.Row {
		return team.Row{Summary: team.Summary{RunID: id, Holder: teamstate.Holder{Host: host, User: user, PID: pid, ID: id + "-lease"}}}
	}
	rows := []team.Row{
		row("a", "box1", "ana", 10),
		row("b", "box1", "ben", 11), // another user on my host
		row("c", "box2", "ana", 12), // me on another host
		row("d", "box1", "ana", 99), // an earlier controller of mine
		row("e", "", "", 0),         // never held
	}
	me := teamstate.Holder{Host: "box1", User: "ana", PID: 1, ID: "now"}
	var got []string
	for _, r := range team.HeldFrom(rows, me) {
		got = append(got, r.RunID)
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "d" {
		t.Fatalf("kept %v, want [a d]", got)
	}
	if kept := team.HeldFrom(rows, teamstate.Holder{Host: "box9", User: "zoe"}); len(kept) != 0 {
		t.Fatalf("a stranger keeps %v", kept)
	}
	if len(rows) != 5 || rows[1].RunID != "b" {
		t.Fatalf("the input was changed: %v", rows)
	}
}
