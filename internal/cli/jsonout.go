package cli

import (
	"math"
	"path/filepath"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
)

// execJSON is `vastrun exec --json` (vastrun.exec/v1): the command's output
// streams to stderr as it runs; stdout gets this one document.
type execJSON struct {
	Schema   string              `json:"schema"`
	RunID    string              `json:"run_id,omitempty"`
	Instance provider.InstanceID `json:"instance_id"`
	ExitCode int                 `json:"exit_code"`
	Signal   string              `json:"signal,omitempty"`
	TimedOut bool                `json:"timed_out"`
	// Result is what the command wrote to $VASTRUN_RESULT, when it did.
	Result map[string]any `json:"result,omitempty"`
	Log    string         `json:"log"`
}

func execResult(e *lifecycle.Scope, instance int64, res *receipt.TestOutcome) execJSON {
	out := execJSON{Schema: "vastrun.exec/v1", Instance: provider.InstanceID(instance), ExitCode: res.Code(), Signal: res.Signal,
		TimedOut: res.TimedOut, Result: res.Result, Log: filepath.Join(e.EvidenceDir, res.Log)}
	if st := e.State(); st != nil {
		out.RunID = st.RunID
		if a := st.Current(); instance == 0 && a != nil {
			out.Instance = a.InstanceID
		}
	}
	return out
}

// outcomeOrUnfinished never leaves an outcome empty in JSON.
func outcomeOrUnfinished(o string) string {
	if o == "" {
		return report.OutcomeUnfinished
	}
	return o
}

// canaryInitJSON is `vastrun canary init --json` (vastrun.canary.init/v1).
type canaryInitJSON struct {
	Schema  string   `json:"schema"`
	YAML    string   `json:"yaml"`
	Sources []string `json:"sources"`
	// Written is the file the section was added to (--write).
	Written string `json:"written,omitempty"`
}

// canaryValidateJSON is `vastrun canary validate --json`
// (vastrun.canary.validate/v1); it is printed whether or not the contract
// is valid, and the exit status says which (2 when not).
type canaryValidateJSON struct {
	Schema     string   `json:"schema"`
	File       string   `json:"file"`
	Valid      bool     `json:"valid"`
	Problems   []string `json:"problems"`
	Smoke      string   `json:"smoke"`
	ExpectExit int      `json:"expect_exit"`
	Fields     []string `json:"expect_fields"`
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// round6 rounds dollars (and $/h) to a millionth: Vast's own figures carry
// float noise that is no part of the contract.
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }
