package archtest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// layout pins every import arrow between vastrun's own packages: a package
// listed here may import exactly the packages of ours on its line, nothing
// else. An arrow that is not here is a layering decision: make it here, in
// review, not by accident in an import block.
//
// The direction: cli → {workflow/*, janitor, report, team, …} → lifecycle
// (the core) → {runstate, receipt, provider, provider/retry, poll, remote,
// agent, journal, storage, checkpoint, …}. The readers of runs (report,
// team) stand beside the core, on runstate (the replayed journal) and
// receipt (the receipt's schema), never on the core; receipt imports only
// the leaf packages whose types it carries, janitor only provider and
// label, and nothing but cmd/vastrun imports cli.
var layout = map[string][]string{
	"cmd/vastrun":                    {"internal/cli"},
	"internal/agent":                 {"internal/checkpoint", "internal/clock", "internal/poll", "internal/remote", "internal/storage"}, // remote: the client's Runner speaks remote.Command; storage: the handlers open the store the request names; poll: the dead-man switch's destroy backs off as every wait does
	"internal/smoke":                 {"internal/clock", "internal/config", "internal/image", "internal/redact"},
	"internal/container":             {},
	"internal/checkpoint":            {"internal/storage"},
	"internal/cienv":                 {"internal/redact"}, // redact: the CI system's files are written through the sink
	"internal/clock":                 {},
	"internal/config":                {"internal/label", "internal/notify", "internal/policy", "internal/text"}, // label: label_prefix is checked against the label rules when the file is read; text: did you mean, for a misspelt key; notify: the event names
	"internal/image":                 {},
	"internal/janitor":               {"internal/label", "internal/provider"},
	"internal/journal":               {"internal/redact"}, // redact: every record is masked before it is written
	"internal/label":                 {},
	"internal/policy":                {"internal/provider"},
	"internal/plan":                  {"internal/spec"}, // a saved plan binds the spec the run will freeze, and names the fields that changed
	"internal/mcpserver":             {"internal/plan"}, // the tools run commands through the CLI's Runner; apply reads the plan it asks the operator about
	"internal/poll":                  {"internal/clock", "internal/provider"},
	"internal/preflight":             {"internal/agent", "internal/config", "internal/policy", "internal/provider", "internal/redact", "internal/storage", "internal/text", "internal/workdir"}, // workdir: uploads must lie inside the repository; storage: the stores a run writes to are probed before renting; agent: the binary every instance runs as its switch is checked before renting
	"internal/progress":              {"internal/clock"},
	"internal/provider":              {},
	"internal/publish":               {"internal/container", "internal/image"},
	"internal/provider/openapitest":  {},
	"internal/provider/providertest": {"internal/provider"},
	"internal/provider/retry":        {"internal/clock", "internal/poll", "internal/provider"},
	"internal/provider/sim":          {"internal/clock", "internal/container", "internal/provider"}, // container: the image path (instances run inside their image); the bid unit (provider.BidPerGPU) is one constant for client and simulator
	"internal/provider/vast":         {"internal/clock", "internal/poll", "internal/provider", "internal/text"},
	"internal/receipt":               {"internal/smoke", "internal/checkpoint", "internal/policy", "internal/provider", "internal/text"}, // the schema names the canary's server report and field delta, the checkpoint's skips, the instance ids, the offer verdicts of selection.json
	"internal/redact":                {},
	"internal/notify":                {"internal/clock"}, // a run's events to a webhook: it knows no run, only events
	"internal/redact/redacttest":     {},                 // finds forms of a secret apart from the masking code: imports none of it
	"internal/remote":                {"internal/clock", "internal/text"},
	"internal/report":                {"internal/journal", "internal/provider", "internal/receipt", "internal/runstate", "internal/spec", "internal/text"}, // the runs listing and the HTML report: both read receipts and replayed journals; text: values as people read
	// agent: every rental's dead-man switch is armed and beaten by the core (deadman.go).
	"internal/lifecycle": {"internal/agent", "internal/cienv", "internal/clock", "internal/config", "internal/journal",
		"internal/label", "internal/notify", "internal/policy", "internal/poll", "internal/progress", "internal/provider", "internal/provider/retry", "internal/receipt",
		"internal/redact", "internal/runstate", "internal/remote", "internal/spec", "internal/storage", "internal/workdir", "internal/text"},
	"internal/runstate":            {"internal/journal", "internal/provider", "internal/receipt"}, // the replayed state holds the receipt's attempts and outcome
	"internal/spec":                {"internal/config", "internal/policy"},                        // spec.Build: the one place a config becomes a spec
	"internal/s3client":            {},
	"internal/sha256x2":            {},
	"internal/text":                {},                                                                                                                                          // string helpers any room may use: last lines, a dash for nothing, edit distance
	"internal/teamstate":           {"internal/clock", "internal/redact", "internal/s3client"},                                                                                  // redact: the probe's cache is written through the sink
	"internal/team":                {"internal/clock", "internal/journal", "internal/label", "internal/provider", "internal/redact", "internal/runstate", "internal/teamstate"}, // redact: the local copy of a run is written through the sink
	"internal/storage":             {"internal/s3client", "internal/sha256x2"},
	"internal/storage/storagetest": {"internal/storage"},
	"internal/sweep":               {},
	"internal/workdir":             {},
	// The workflows stand on the core and never on the configuration: they
	// read the run's frozen spec (run.Engine.Frozen). The core imports none
	// of them (its arrows above), so it names no workflow.
	// progress: each workflow names the phase its own work is shown as.
	"internal/workflow/canary": {"internal/smoke", "internal/clock", "internal/container", "internal/progress", "internal/provider", "internal/receipt", "internal/remote", "internal/lifecycle", "internal/text"},
	"internal/workflow/ci":     {"internal/progress", "internal/provider", "internal/receipt", "internal/remote", "internal/lifecycle"},
	"internal/workflow/train": {"internal/agent", "internal/checkpoint", "internal/clock", "internal/progress", "internal/provider", "internal/receipt", "internal/remote",
		"internal/lifecycle", "internal/runstate", "internal/spec", "internal/storage", "internal/text"}, // runstate: the outbid loop reads the interruption records
}

func TestEveryImportArrowIsPinned(t *testing.T) {
	all := imports(t)
	for pkg, allowed := range layout {
		if _, err := os.Stat(filepath.Join("..", "..", pkg)); err != nil {
			t.Errorf("layout names %s, which does not exist: remove it from the table", pkg)
			continue
		}
		ok := map[string]bool{}
		for _, a := range allowed {
			ok[a] = true
		}
		for _, imp := range all[pkg] {
			own, isOurs := strings.CutPrefix(imp, module)
			if isOurs && !ok[own] {
				t.Errorf("%s imports %s: not an arrow of the layout (add it to layout in archtest, with the reason, or drop the import)", pkg, own)
			}
		}
	}
}

// A package the table does not know may import anything below the CLI, but
// never the CLI itself; and no package outside the table is imported by the
// core, so a new package cannot slip under the lifecycle unreviewed.
func TestNewPackagesStayOutsideTheCore(t *testing.T) {
	all := imports(t)
	var unknown []string
	for pkg, imps := range all {
		if _, ok := layout[pkg]; ok || pkg == "internal/archtest" || strings.HasPrefix(pkg, "test/") {
			continue
		}
		unknown = append(unknown, pkg)
		for _, imp := range imps {
			if imp == module+"internal/cli" {
				t.Errorf("%s imports internal/cli; only cmd/vastrun may", pkg)
			}
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Logf("packages not yet in the layout table (their arrows are unpinned): %v", unknown)
	}
}

// The core never imports what sits above it or beside it as a peer: the CLI,
// the presentation (report), the janitor, or the simulator.
func TestTheCoreImportsNothingAboveIt(t *testing.T) {
	for _, imp := range imports(t)["internal/lifecycle"] {
		for _, above := range []string{"internal/cli", "internal/report", "internal/janitor", "internal/provider/sim", "internal/provider/vast"} {
			if imp == module+above {
				t.Errorf("internal/lifecycle imports %s", above)
			}
		}
	}
}

// The readers of finished and live runs (the report and runs listing,
// the team state) read receipts, journals and replayed state without the
// lifecycle core, directly or through anything they import: they must keep
// working on runs whatever the core becomes.
func TestRunReadersStandOffTheCore(t *testing.T) {
	all := imports(t)
	for _, reader := range []string{"internal/report", "internal/team"} {
		if _, ok := all[reader]; !ok {
			t.Errorf("%s: no such package: update this test", reader)
			continue
		}
		seen := map[string]string{reader: ""}
		queue := []string{reader}
		for len(queue) > 0 {
			pkg := queue[0]
			queue = queue[1:]
			for _, imp := range all[pkg] {
				own, ours := strings.CutPrefix(imp, module)
				if _, done := seen[own]; !ours || done {
					continue
				}
				seen[own] = pkg
				if own == "internal/lifecycle" {
					t.Errorf("%s imports internal/lifecycle (through %s)", reader, pkg)
				}
				queue = append(queue, own)
			}
		}
	}
}

// The MCP server acts only through vastrun's commands (its Runner): it
// reaches neither the lifecycle core nor a marketplace client, so a tool
// cannot rent or destroy except as the command it runs would, approval
// included.
func TestMCPServerActsOnlyThroughCommands(t *testing.T) {
	all := imports(t)
	if _, ok := all["internal/mcpserver"]; !ok {
		t.Fatal("internal/mcpserver: no such package: update this test")
	}
	seen := map[string]bool{"internal/mcpserver": true}
	queue := []string{"internal/mcpserver"}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		for _, imp := range all[pkg] {
			own, ours := strings.CutPrefix(imp, module)
			if !ours || seen[own] {
				continue
			}
			seen[own] = true
			for _, banned := range []string{"internal/cli", "internal/lifecycle", "internal/provider/vast", "internal/provider/sim", "internal/provider/retry"} {
				if own == banned {
					t.Errorf("internal/mcpserver reaches %s (through %s): its tools act only through vastrun's commands", own, pkg)
				}
			}
			queue = append(queue, own)
		}
	}
}
