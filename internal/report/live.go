package report

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// Live is a run of the state dir that still holds, or may hold, instances
// (what `vastrun down --all` tears down).
type Live struct {
	Dir         string
	RunID       string
	Label       string
	Unconfirmed []provider.InstanceID
	// Ambiguous is an unfinished run with a create it never learned the
	// outcome of: an instance may exist that its journal does not name.
	Ambiguous bool
}

// LiveRuns lists the runs under stateDir that still hold, or may hold,
// instances — destructions not confirmed, or an unfinished run whose create
// was never answered — by run id. Journals are only read; a damaged one is
// left out (`vastrun down --run` names it and its label).
func LiveRuns(stateDir string) []Live {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "runs"))
	var out []Live
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		dir := filepath.Join(stateDir, "runs", ent.Name())
		st, err := runstate.LoadState(dir)
		if err != nil {
			continue
		}
		if l, ok := live(dir, st); ok {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RunID < out[j].RunID })
	return out
}

// live says whether a run's state holds or may hold instances.
func live(dir string, st *runstate.State) (Live, bool) {
	amb := st.AmbiguousRent() && st.Outcome == ""
	un := st.Unconfirmed()
	if len(un) == 0 && !amb {
		return Live{}, false
	}
	return Live{Dir: dir, RunID: st.RunID, Label: st.Label, Unconfirmed: un, Ambiguous: amb}, true
}

// Latest is the id of the state dir's latest run ("current"), or "".
func Latest(stateDir string) string {
	b, _ := os.ReadFile(filepath.Join(stateDir, "current"))
	return strings.TrimSpace(string(b))
}

// Others are the live runs other than the run with id latest: those a
// plain `vastrun down` (the latest run only) would leave behind.
func Others(live []Live, latest string) []Live {
	var out []Live
	for _, r := range live {
		if r.RunID != latest {
			out = append(out, r)
		}
	}
	return out
}

// WithLabel is the directory of the run under stateDir whose run carries
// label, or "".
func WithLabel(stateDir, label string) string {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "runs"))
	for _, ent := range entries {
		dir := filepath.Join(stateDir, "runs", ent.Name())
		if st, err := runstate.LoadState(dir); err == nil && st.Label == label {
			return dir
		}
	}
	return ""
}

// NewlyConfirmed are the instances confirmed destroyed in after that were
// not yet in before, each once, in after's order: what one `down` call
// destroyed, for its report (an instance confirmed gone earlier is not
// news).
func NewlyConfirmed(before, after []*receipt.Attempt) []provider.InstanceID {
	seen := map[provider.InstanceID]bool{}
	for _, a := range before {
		if a.Confirmed {
			seen[a.InstanceID] = true
		}
	}
	out := []provider.InstanceID{}
	for _, a := range after {
		if a.Confirmed && a.InstanceID != 0 && !seen[a.InstanceID] {
			seen[a.InstanceID] = true
			out = append(out, a.InstanceID)
		}
	}
	return out
}
