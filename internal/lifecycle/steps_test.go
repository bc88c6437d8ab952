package lifecycle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// These tables exercise each shared step alone, on a fake market and a
// fake clock (fakemarket_test.go): no simulator, no SSH, no network.

func TestStepGate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gate    string // the config's gate: line
		wantErr error
		wantRec string // the gate's own journal record
		wantLog string // in gate.log
	}{
		{name: "no commands: nothing to run, passes", gate: "", wantRec: ""},
		{name: "every command passes", gate: `gate: ["true", "echo cpu ok"]`, wantRec: "done:gate", wantLog: "cpu ok"},
		{name: "a failing command gates the run", gate: `gate: ["true", "echo cpu tests failed; exit 1", "echo never"]`,
			wantErr: ErrGated, wantRec: "failed:gate", wantLog: "cpu tests failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStepRig(t, stepConfig+tc.gate+"\n", newFakeMarket(offer(1, 10, 0.4)))
			err := Gate.Do(context.Background(), r.s)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("gate: %v, want %v", err, tc.wantErr)
			}
			c := r.s.State().Condition(stepGate)
			if tc.wantErr != nil {
				if Outcome(err) != OutcomeGated || c.Status != runstate.ConditionFalse || c.Reason != string(OutcomeGated) {
					t.Fatalf("outcome %s, condition %+v", Outcome(err), c)
				}
				if Gate.Done(r.s) {
					t.Fatal("a failed gate is Done: a resumed run would rent without it")
				}
			} else if c.Status != runstate.ConditionTrue || !Gate.Done(r.s) {
				t.Fatalf("condition after a pass: %+v", c)
			}
			j := r.journal()
			if tc.wantRec != "" && count(j, tc.wantRec) != 1 || tc.wantRec == "" && count(j, "done:gate")+count(j, "failed:gate") != 0 {
				t.Fatalf("journal %v, want one %q", j, tc.wantRec)
			}
			if tc.wantLog != "" {
				b, _ := os.ReadFile(filepath.Join(r.s.EvidenceDir, "gate.log"))
				if !strings.Contains(string(b), tc.wantLog) || strings.Contains(string(b), "never") {
					t.Fatalf("gate.log:\n%s", b)
				}
			}
			if c := r.m.calls(); len(c) != 0 {
				t.Fatalf("the gate called the market: %v", c)
			}
		})
	}
}

// A gate that passed is Done for the run reopened from its journal: a
// resumed run never runs the gate again.
func TestStepGateDoneOnResume(t *testing.T) {
	r := newStepRig(t, stepConfig+`gate: ["true"]`+"\n", newFakeMarket())
	if err := Gate.Do(context.Background(), r.s); err != nil {
		t.Fatal(err)
	}
	r.s.Close()
	s2 := New(r.s.Deps)
	if err := s2.Open(r.s.RunDir()); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if !Gate.Done(s2) {
		t.Fatalf("reopened run's gate condition: %+v", s2.State().Condition(stepGate))
	}
}

func TestStepPaths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		paths   string
		base    string
		touch   string // the change's file, committed on a branch off main
		wantErr error
	}{
		{name: "no paths configured: runs without git", paths: ""},
		{name: "a changed file matches: runs", paths: `paths: ["gpu/**"]`, base: "main", touch: "gpu/kernel.cu"},
		{name: "no changed file matches: skipped", paths: `paths: ["gpu/**"]`, base: "main", touch: "README.md", wantErr: ErrSkipped},
		{name: "no base to diff against: runs", paths: `paths: ["gpu/**"]`, touch: "README.md"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStepRig(t, stepConfig+tc.paths+"\n", newFakeMarket())
			if tc.touch != "" {
				gitChange(t, r.s.RepoDir, tc.touch)
			}
			r.s.Base = tc.base
			err := Paths.Do(context.Background(), r.s)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("paths: %v, want %v", err, tc.wantErr)
			}
			c := r.s.State().Condition(stepPaths)
			if tc.wantErr != nil {
				if Outcome(err) != OutcomeSkipped || c.Status != runstate.ConditionFalse || c.Reason != string(OutcomeSkipped) {
					t.Fatalf("outcome %s, condition %+v", Outcome(err), c)
				}
			} else if !c.IsTrue() || !Paths.Done(r.s) {
				t.Fatalf("condition when the step runs: %+v", c)
			}
		})
	}
}

// gitChange makes dir a repository whose main holds a base commit and
// whose checked-out branch adds file on top of it.
func gitChange(t *testing.T, dir, file string) {
	t.Helper()
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
			"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main")
	write("base.txt")
	git("add", ".")
	git("commit", "-qm", "base")
	git("checkout", "-qb", "change")
	write(file)
	git("add", ".")
	git("commit", "-qm", "change")
}

func TestStepChecks(t *testing.T) {
	const login = "image_login: {registry: ghcr.io, user_env: REG_USER, token_env: REG_TOKEN}\n"
	for _, tc := range []struct {
		name    string
		config  string
		env     map[string]string
		wantIs  error  // the error's class, when it has one
		wantMsg string // what the error must name; "" means no error
	}{
		{name: "all good", config: stepConfig + "secrets: [HF_TOKEN]\n" + login,
			env: map[string]string{"HF_TOKEN": "hf_x", "REG_USER": "u", "REG_TOKEN": "tok"}},
		{name: "image by tag", config: strings.Replace(stepConfig, stepImage, "ghcr.io/acme/gpu-test:latest", 1),
			wantIs: ErrMutableImage, wantMsg: "ghcr.io/acme/gpu-test:latest"},
		{name: "declared secret unset", config: stepConfig + "secrets: [HF_TOKEN]\n", wantMsg: "HF_TOKEN"},
		{name: "private image login token unset", config: stepConfig + login, env: map[string]string{"REG_USER": "u"},
			wantIs: ErrImageLogin, wantMsg: "REG_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStepRig(t, tc.config, newFakeMarket())
			for k, v := range tc.env {
				r.env[k] = v
			}
			err := Checks.Do(context.Background(), r.s)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("checks: %v", err)
				}
			} else {
				var se *StepError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.wantMsg) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) {
					t.Fatalf("checks: %v, want a StepError naming %q (class %v)", err, tc.wantMsg, tc.wantIs)
				}
			}
			// Checked again by every run, resumed or not.
			if Checks.Done(r.s) {
				t.Fatal("checks are Done")
			}
			if _, ok := r.s.State().Conditions[Checks.Name()]; ok {
				t.Fatal("checks journaled a condition: a resumed run would read it")
			}
		})
	}
}

func TestStepFreeze(t *testing.T) {
	r := newStepRig(t, stepConfig, newFakeMarket())
	if Freeze.Done(r.s) {
		t.Fatal("Done before the freeze")
	}
	if err := Freeze.Do(context.Background(), r.s); err != nil {
		t.Fatal(err)
	}
	hash := r.s.State().ManifestHash
	var first []byte
	for _, dir := range []string{r.s.RunDir(), r.s.EvidenceDir} {
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(bytes.TrimSuffix(b, []byte("\n")))
		if hex.EncodeToString(sum[:]) != hash {
			t.Fatalf("%s/manifest.json hashes to %x, journal says %s", dir, sum, hash)
		}
		first = b
	}
	if !Freeze.Done(r.s) || !r.s.State().Condition(stepFreeze).IsTrue() {
		t.Fatalf("after the freeze: condition %+v", r.s.State().Condition(stepFreeze))
	}
	// Never twice: a second Do, later, rewrites nothing and journals no
	// second freeze.
	r.clk.Advance(time.Hour)
	if err := Freeze.Do(context.Background(), r.s); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(r.s.RunDir(), "manifest.json"))
	if !bytes.Equal(b, first) || r.s.State().ManifestHash != hash || count(r.journal(), "done:freeze") != 1 {
		t.Fatalf("second freeze changed the manifest or journaled again: %v", r.journal())
	}
}

// authFail stops a provision at its connect, before any SSH dial: the
// key cannot be attached.
var authFail = &provider.APIError{Op: "attach SSH key", Status: 401, Code: "auth_error"}

func TestStepProvision(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		offers []provider.Offer
		setup  func(r *stepRig)
		check  func(t *testing.T, r *stepRig, err error)
	}{
		{
			name: "no offer meets the policy: nothing rented", offers: []provider.Offer{offer(1, 10, 5)}, // over max_dph
			check: func(t *testing.T, r *stepRig, err error) {
				if !errors.Is(err, ErrNoOffer) || Outcome(err) != OutcomeNoOffer || r.s.State().Condition(stepSelect).Status != runstate.ConditionFalse {
					t.Fatalf("%v (%s) %+v", err, Outcome(err), r.s.State().Condition(stepSelect))
				}
				if len(r.approvals) != 0 || slices.ContainsFunc(r.m.calls(), isCreate) {
					t.Fatalf("approved %d, calls %v", len(r.approvals), r.m.calls())
				}
			},
		},
		{
			name: "approval refused: nothing rented", offers: []provider.Offer{offer(1, 10, 0.4)},
			setup: func(r *stepRig) { r.approve = false },
			check: func(t *testing.T, r *stepRig, err error) {
				if !errors.Is(err, ErrNeedsApproval) || Outcome(err) != OutcomeNotApproved || len(r.approvals) != 1 {
					t.Fatalf("%v (%s), %d approvals", err, Outcome(err), len(r.approvals))
				}
				if slices.ContainsFunc(r.m.calls(), isCreate) || len(r.s.State().Attempts) != 0 {
					t.Fatalf("rented without approval: %v", r.m.calls())
				}
			},
		},
		{
			name: "worst case over the budget: refused before asking", config: strings.Replace(stepConfig, "max_spend: 2", "max_spend: 0.01", 1),
			offers: []provider.Offer{offer(1, 10, 0.4)},
			check: func(t *testing.T, r *stepRig, err error) {
				if Outcome(err) != OutcomeBudget || !strings.Contains(fmt.Sprint(err), "budget.max_spend") {
					t.Fatalf("%v (%s)", err, Outcome(err))
				}
				if len(r.approvals) != 0 || slices.ContainsFunc(r.m.calls(), isCreate) {
					t.Fatalf("approved %d, calls %v", len(r.approvals), r.m.calls())
				}
			},
		},
		{
			name: "ambiguous create that rented: adopted by label, never created again", offers: []provider.Offer{offer(1, 10, 0.4), offer(2, 20, 0.5)},
			setup: func(r *stepRig) {
				r.m.createLag = 2 // read-after-create lag: the grace covers it
				r.m.fail("create", rentedAnyway{&provider.OutcomeUnknownError{Op: "create instance", Label: r.s.State().Label, Err: errors.New("response lost")}})
				r.m.fail("attach", authFail)
			},
			check: func(t *testing.T, r *stepRig, err error) {
				st := r.s.State()
				if calls := r.m.calls(); !slices.Contains(calls, "show 101") || count(calls[:slices.Index(calls, "show 101")], "list") < 3 {
					t.Fatalf("adopted without listing through the lag: %v", calls)
				}
				if len(st.Attempts) != 1 || st.Attempts[0].InstanceID != 101 || count(r.m.calls(), "create 1") != 1 || count(r.m.calls(), "create 2") != 0 {
					t.Fatalf("attempts %+v calls %v", st.Attempts, r.m.calls())
				}
				if j := r.journal(); count(j, "done:adopt") != 1 || count(j, "done:rent") != 0 {
					t.Fatalf("journal %v", j)
				}
				if c := st.Condition(stepReady); !c.IsTrue() || c.Instance != 101 {
					t.Fatalf("ready condition %+v", c)
				}
				assertStoppedAtAttach(t, r, err, 101)
			},
		},
		{
			name: "ambiguous create naming its contract: adopted by id while listings lag", offers: []provider.Offer{offer(1, 10, 0.4)},
			setup: func(r *stepRig) {
				r.m.createLag = 1000
				r.m.fail("create", rentedAnyway{&provider.OutcomeUnknownError{Op: "create instance", Label: r.s.State().Label, InstanceID: 101, Err: errors.New("HTTP 500")}})
				r.m.fail("attach", authFail)
			},
			check: func(t *testing.T, r *stepRig, err error) {
				st := r.s.State()
				if len(st.Attempts) != 1 || st.Attempts[0].InstanceID != 101 || count(r.m.calls(), "create 1") != 1 || count(r.journal(), "done:adopt") != 1 {
					t.Fatalf("attempts %+v calls %v", st.Attempts, r.m.calls())
				}
				assertStoppedAtAttach(t, r, err, 101)
			},
		},
		{
			name: "ambiguous create that rented nothing: the next offer is rented", offers: []provider.Offer{offer(1, 10, 0.4), offer(2, 20, 0.5)},
			setup: func(r *stepRig) {
				r.m.fail("create", &provider.OutcomeUnknownError{Op: "create instance", Label: r.s.State().Label, Err: errors.New("timeout")})
				r.m.fail("attach", authFail)
			},
			check: func(t *testing.T, r *stepRig, err error) {
				st := r.s.State()
				if len(st.Attempts) != 2 || st.Attempts[0].InstanceID != 0 || !strings.Contains(st.Attempts[0].Failure, "nothing carries the label") ||
					st.Attempts[1].OfferID != 2 || st.Attempts[1].InstanceID != 101 {
					t.Fatalf("attempts %+v", st.Attempts)
				}
				calls := r.m.calls()
				// The label was listed (the grace) before anything else was rented.
				if !before(calls, "list", "create 2") || count(calls, "create 1") != 1 || len(r.m.live()) != 1 {
					t.Fatalf("calls %v live %v", calls, r.m.live())
				}
				assertStoppedAtAttach(t, r, err, 101)
			},
		},
		{
			name: "instance exits while waiting: destroyed, replaced on another machine", offers: []provider.Offer{offer(1, 10, 0.4), offer(2, 20, 0.5)},
			setup: func(r *stepRig) {
				r.m.statuses[1] = []string{"loading", "exited"}
				r.m.fail("attach", authFail)
			},
			check: func(t *testing.T, r *stepRig, err error) {
				st := r.s.State()
				if len(st.Attempts) != 2 {
					t.Fatalf("attempts %+v", st.Attempts)
				}
				a, b := st.Attempts[0], st.Attempts[1]
				if a.InstanceID != 101 || !strings.Contains(a.Failure, "exited") || !a.Confirmed || a.MachineID != 10 {
					t.Fatalf("first attempt %+v", a)
				}
				if b.InstanceID != 102 || b.MachineID == a.MachineID || b.Failure != "" {
					t.Fatalf("replacement %+v", b)
				}
				calls := r.m.calls()
				if !before(calls, "destroy 101", "create 2") || len(r.approvals) != 2 || !slices.Equal(r.m.live(), []provider.InstanceID{102}) {
					t.Fatalf("calls %v approvals %d live %v", calls, len(r.approvals), r.m.live())
				}
				if j := r.journal(); count(j, "event:failover") != 1 {
					t.Fatalf("journal %v", j)
				}
				assertStoppedAtAttach(t, r, err, 102)
			},
		},
		{
			name: "both rentals exit: ready failure after one replacement", offers: []provider.Offer{offer(1, 10, 0.4), offer(2, 20, 0.5), offer(3, 30, 0.6)},
			setup: func(r *stepRig) {
				r.m.statuses[1] = []string{"exited"}
				r.m.statuses[2] = []string{"exited"}
			},
			check: func(t *testing.T, r *stepRig, err error) {
				if Outcome(err) != OutcomeReadyFailed {
					t.Fatalf("%v (%s)", err, Outcome(err))
				}
				st := r.s.State()
				if len(st.Attempts) != maxAttempts || len(st.Unconfirmed()) != 0 || len(r.m.live()) != 0 {
					t.Fatalf("attempts %+v unconfirmed %v live %v", st.Attempts, st.Unconfirmed(), r.m.live())
				}
				if calls := r.m.calls(); slices.Contains(calls, "create 3") || slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "attach") }) {
					t.Fatalf("a third rental or a connect: %v", calls)
				}
			},
		},
		{
			name: "resumed with the run's instance no longer running: destroyed, replaced elsewhere", offers: []provider.Offer{offer(1, 10, 0.4), offer(2, 20, 0.5)},
			setup: func(r *stepRig) {
				// A controller restarted after its rental exited.
				r.m.add(50, 10, r.s.State().Label, 0)
				r.m.instances[50].statuses = []string{"exited"}
				r.rented(50, 10)
				r.m.fail("attach", authFail)
			},
			check: func(t *testing.T, r *stepRig, err error) {
				calls := r.m.calls()
				if len(calls) < 2 || calls[0] != "show 50" || calls[1] != "destroy 50" || !before(calls, "destroy 50", "search") {
					t.Fatalf("calls %v", calls)
				}
				st := r.s.State()
				if len(st.Attempts) != 2 || !st.Attempts[0].Confirmed || st.Attempts[0].Failure == "" || st.Attempts[1].MachineID != 20 {
					t.Fatalf("attempts %+v", st.Attempts)
				}
				assertStoppedAtAttach(t, r, err, 101)
			},
		},
		{
			name: "earlier unconfirmed instance: destroyed before anything new is rented", offers: []provider.Offer{offer(1, 10, 0.4)},
			setup: func(r *stepRig) {
				// A controller killed between its failover and the confirm.
				r.m.add(50, 10, r.s.State().Label, 0)
				r.rented(50, 10)
				if err := r.s.Record("event", stepFailover, runstate.InstanceData{Instance: 50, Reason: "actual_status exited"}); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, r *stepRig, err error) {
				calls := r.m.calls()
				if len(calls) == 0 || calls[0] != "destroy 50" || !before(calls, "destroy 50", "search") {
					t.Fatalf("calls %v", calls)
				}
				if a := r.s.State().AttemptFor(50); a == nil || !a.Confirmed {
					t.Fatalf("earlier instance %+v", a)
				}
				// Its machine failed this run: the only offer is on it.
				if !errors.Is(err, ErrNoOffer) || slices.ContainsFunc(calls, isCreate) {
					t.Fatalf("%v, calls %v", err, calls)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.config
			if cfg == "" {
				cfg = stepConfig
			}
			r := newStepRig(t, cfg, newFakeMarket(tc.offers...))
			if err := Freeze.Do(context.Background(), r.s); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(r)
			}
			err := Provision.Do(context.Background(), r.s)
			if err == nil {
				t.Fatal("provision succeeded without SSH")
			}
			tc.check(t, r, err)
		})
	}
}

func isCreate(c string) bool { return strings.HasPrefix(c, "create") }

// assertStoppedAtAttach checks that provision got id ready and ended at
// attaching its key (the scripted auth failure), never dialling.
func assertStoppedAtAttach(t *testing.T, r *stepRig, err error, id provider.InstanceID) {
	t.Helper()
	var se *StepError
	if !errors.As(err, &se) || se.Step != "attach SSH key" || se.Instance != id || !errors.Is(err, provider.ErrAuth) {
		t.Fatalf("provision ended with %v, want the attach failure on %d", err, id)
	}
	if c := r.s.State().Condition(stepConnect); c.Status != runstate.ConditionFalse || c.Instance != id {
		t.Fatalf("connect condition %+v", c)
	}
}

// TestStepTeardown pins which instances teardown destroys and in which
// order it asks the market: every id the journal knows is destroyed and
// confirmed by id before the label is listed at all, and the one label
// sweep afterwards only looks for what the journal did not know. A
// listing that never completes, with every known id confirmed, is a
// warning, not an unconfirmed cleanup (teardown_order_test.go has more).
func TestStepTeardown(t *testing.T) {
	unavailable := &provider.APIError{Op: "destroy instance 101", Status: 503}
	incomplete := fmt.Errorf("list instances: %w", provider.ErrIncompleteListing)
	for _, tc := range []struct {
		name  string
		known []provider.InstanceID // rented by the run (journaled)
		extra []provider.InstanceID // carrying the label, unknown to the journal
		// lagged carry the label but miss the first listing; ambiguous
		// journals a create whose outcome is unknown (so the label is swept).
		lagged    []provider.InstanceID
		ambiguous bool
		fail      map[string][]error
		methods   []string // the calls wantCalls is compared on
		// wantCalls is the market's calls, in order, of methods.
		wantCalls       []string
		wantUnconfirmed []provider.InstanceID // nil: cleanup confirmed
		// wantWarning: confirmed, but the label sweep never completed (the
		// known ids are confirmed by show alone).
		wantWarning bool
	}{
		{
			name: "nothing rented: one listing", methods: []string{"destroy", "list"},
			wantCalls: []string{"list"},
		},
		{
			// ORDER (flipped): the known ids' destroys and confirms come
			// before the one listing, which then confirms them all.
			name: "every known instance destroyed and confirmed", known: []provider.InstanceID{101, 102}, methods: []string{"destroy", "show", "list"},
			wantCalls: []string{"destroy 101", "show 101", "destroy 102", "show 102", "list"},
		},
		{
			// ORDER (flipped): the listing follows destroy 101's confirm.
			name: "a destroy answered 503 is sent again", known: []provider.InstanceID{101}, fail: map[string][]error{"destroy": {unavailable}},
			methods: []string{"destroy", "show", "list"}, wantCalls: []string{"destroy 101", "destroy 101", "show 101", "list"},
		},
		{
			// Known ids first, then what the listing found.
			name: "an id only the label listing shows is adopted and destroyed", known: []provider.InstanceID{101}, extra: []provider.InstanceID{150},
			methods: []string{"destroy", "list"}, wantCalls: []string{"destroy 101", "list", "destroy 150", "list"},
		},
		{
			// ORDER (flipped): destroy 101 comes first; the failing listing
			// is the sweep's, retried.
			name: "a label listing that fails once is retried", known: []provider.InstanceID{101}, fail: map[string][]error{"list": {incomplete}},
			methods: []string{"destroy", "list"}, wantCalls: []string{"destroy 101", "list", "list"},
		},
		{
			name: "a create with unknown outcome: the label is swept until clean", ambiguous: true, lagged: []provider.InstanceID{160},
			methods: []string{"destroy"}, wantCalls: []string{"destroy 160"},
		},
		{
			// ORDER (flipped): 101 is destroyed and confirmed by id first;
			// the listing that never completes is only a warning.
			name: "a label listing that never completes: confirmed by id, warned", known: []provider.InstanceID{101},
			fail:    map[string][]error{"list": slices.Repeat([]error{incomplete}, 1000)},
			methods: []string{"destroy", "show"}, wantCalls: []string{"destroy 101", "show 101"}, wantWarning: true,
		},
		{
			// With a create whose outcome is unknown, an unlisted label is
			// no mere warning: something may be live that nobody saw.
			name: "a label listing that never completes after an ambiguous create: not confirmed", known: []provider.InstanceID{101}, ambiguous: true,
			fail:    map[string][]error{"list": slices.Repeat([]error{incomplete}, 1000)},
			methods: []string{"destroy"}, wantCalls: []string{"destroy 101"}, wantUnconfirmed: []provider.InstanceID{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMarket()
			r := newStepRig(t, stepConfig, m)
			if err := Freeze.Do(context.Background(), r.s); err != nil {
				t.Fatal(err)
			}
			label := r.s.State().Label
			for _, id := range tc.known {
				m.add(id, int64(id), label, 0)
				r.rented(id, int64(id))
			}
			for _, id := range tc.extra {
				m.add(id, int64(id), label, 0)
			}
			for _, id := range tc.lagged {
				m.add(id, int64(id), label, 1)
			}
			if tc.ambiguous {
				if err := r.s.Record("intent", stepRent, runstate.RentIntent{Label: label, Offer: 1, Attempt: receipt.Attempt{MachineID: 10}}); err != nil {
					t.Fatal(err)
				}
			}
			for method, errs := range tc.fail {
				m.fail(method, errs...)
			}
			err := r.s.Teardown(context.Background())
			if got := only(m.calls(), tc.methods...); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("calls %v, want %v (all: %v)", got, tc.wantCalls, m.calls())
			}
			st := r.s.State()
			if got := r.s.cleanupWarnings; (len(got) == 1) != tc.wantWarning || len(got) > 1 {
				t.Fatalf("warnings %q, want one: %v", got, tc.wantWarning)
			}
			if tc.wantUnconfirmed == nil {
				if err != nil || len(st.Unconfirmed()) != 0 || len(m.live()) != 0 {
					t.Fatalf("teardown: %v, unconfirmed %v, live %v", err, st.Unconfirmed(), m.live())
				}
			} else {
				var ce *CleanupError
				if !errors.As(err, &ce) || !slices.Equal(ce.Instances, tc.wantUnconfirmed) || !slices.Equal(st.Unconfirmed(), tc.wantUnconfirmed) {
					t.Fatalf("teardown: %v, unconfirmed %v, want %v", err, st.Unconfirmed(), tc.wantUnconfirmed)
				}
				if j := r.journal(); count(j, "event:alert") != 1 {
					t.Fatalf("an unconfirmed cleanup was not escalated: %v", j)
				}
			}
			for _, id := range tc.extra {
				if !slices.Contains(st.Extras, id) {
					t.Fatalf("extra %d not adopted: %v", id, st.Extras)
				}
			}
			wantVia := []string{"show", "label_listing"}
			if tc.wantWarning {
				wantVia = []string{"show"} // no listing completed
			}
			for _, id := range slices.Concat(tc.known, tc.extra, tc.lagged) {
				if a := st.AttemptFor(id); tc.wantUnconfirmed == nil && (a == nil || !a.Confirmed || !slices.Equal(a.ConfirmedBy, wantVia)) {
					t.Fatalf("instance %d: %+v", id, a)
				}
			}
		})
	}
}

// The closing part on a flow of local steps only: a failed gate ends the
// run gated, with a receipt, nothing rented and the cleanup trivially
// confirmed, and the market never asked a thing.
func TestStepExecuteLocalFlow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		gate        string
		wantOutcome string
		wantErr     error
	}{
		{name: "gate fails: gated", gate: `gate: ["exit 3"]`, wantOutcome: string(OutcomeGated), wantErr: ErrGated},
		{name: "local steps pass: passed", gate: `gate: ["true"]`, wantOutcome: string(OutcomePassed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStepRig(t, stepConfig+tc.gate+"\n", newFakeMarket(offer(1, 10, 0.4)))
			r.s.Close() // Execute begins a run of its own
			rec, err := Execute(context.Background(), r.s, Flow{Name: "ci", Steps: LocalSteps()})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("execute: %v, want %v", err, tc.wantErr)
			}
			if rec == nil || string(rec.Outcome) != tc.wantOutcome || len(rec.Attempts) != 0 || !rec.Cleanup.Confirmed || len(rec.Cleanup.Unconfirmed) != 0 {
				t.Fatalf("receipt %+v", rec)
			}
			if got := r.s.State().Outcome; string(got) != tc.wantOutcome {
				t.Fatalf("journaled outcome %s", got)
			}
			if c := r.m.calls(); len(c) != 0 {
				t.Fatalf("a local flow called the market: %v", c)
			}
			if _, err := os.Stat(filepath.Join(r.s.EvidenceDir, "receipt.json")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// fakeUploader is the upload step's connection without SSH: it records
// each copy ("local -> remote", local relative to the repository) and
// each script, and fails the copy to a remote path named in fail.
type fakeUploader struct {
	repo      string
	copies    []string
	scripts   []string
	fail      map[string]error
	outputErr error
	progress  int // progress callbacks made
}

func (f *fakeUploader) copyOf(local, remote string) error {
	if err := f.fail[remote]; err != nil {
		return err
	}
	if _, err := os.Stat(local); err != nil {
		return err // a real copy reads the file
	}
	rel, err := filepath.Rel(f.repo, local)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = "(outside the repository)/" + filepath.Base(local)
	}
	f.copies = append(f.copies, rel+" -> "+remote)
	return nil
}

func (f *fakeUploader) Upload(local, remote string) error { return f.copyOf(local, remote) }

func (f *fakeUploader) UploadProgress(local, remote string, progress func(int64)) error {
	if err := f.copyOf(local, remote); err != nil {
		return err
	}
	if progress != nil {
		f.progress++
		progress(treeSize(local))
	}
	return nil
}

func (f *fakeUploader) Output(_ context.Context, script string) (string, error) {
	f.scripts = append(f.scripts, script)
	return "", f.outputErr
}

func TestStepUpload(t *testing.T) {
	broken := errors.New("ssh: connection lost")
	for _, tc := range []struct {
		name    string
		config  string           // added to stepConfig
		files   []string         // created in the repository (committed, with git)
		git     bool             // the repository is a git repository
		fail    map[string]error // copies to these remote paths fail
		outErr  error            // the script on the instance fails
		noConn  bool             // no connection at all
		want    []string         // the copies, in order
		wantErr string           // what the error names; "" for none
		wantRun []string         // substrings of the scripts run, in order
		check   func(*testing.T, *stepRig)
	}{
		{name: "nothing to upload: no copy", want: nil},
		{name: "the upload list, each path to the same relative path", config: "upload: [gpu-test.sh, ./data/]\n",
			files: []string{"gpu-test.sh", "data/a.bin", "data/b.bin"}, want: []string{"gpu-test.sh -> gpu-test.sh", "data -> data"}},
		{name: "a path that is not there: nothing is copied, the path is named", config: "upload: [gpu-test.sh, missing.py]\n",
			files: []string{"gpu-test.sh"}, wantErr: "missing.py"},
		{name: "the connection fails on the second path", config: "upload: [a.sh, b.sh]\n", files: []string{"a.sh", "b.sh"},
			fail: map[string]error{"b.sh": broken}, want: []string{"a.sh -> a.sh"}, wantErr: "connection lost"},
		{name: "workdir: one archive and its checksums, unpacked and checked there, manifest kept", config: "workdir: .\nupload: [extra.txt]\n",
			git: true, files: []string{"extra.txt"},
			want:    []string{"(outside the repository)/workdir.tar.gz -> " + remoteWorkdirArchive, "(outside the repository)/workdir.sha256 -> " + remoteWorkdirSums},
			wantRun: []string{"tar -xzf " + remoteWorkdirArchive, "sha256sum -c --quiet " + remoteWorkdirSums},
			check: func(t *testing.T, r *stepRig) {
				b, err := os.ReadFile(filepath.Join(r.s.EvidenceDir, "workdir.json"))
				if err != nil || !strings.Contains(string(b), "extra.txt") || !strings.Contains(string(b), "gpu/kernel.cu") {
					t.Fatalf("workdir.json: %s %v", b, err)
				}
			}},
		{name: "workdir: the checksums do not match on the instance", config: "workdir: .\n", git: true, outErr: errors.New("sha256sum: WARNING: 1 computed checksum did NOT match"),
			want:    []string{"(outside the repository)/workdir.tar.gz -> " + remoteWorkdirArchive, "(outside the repository)/workdir.sha256 -> " + remoteWorkdirSums},
			wantRun: []string{"sha256sum -c --quiet " + remoteWorkdirSums}, wantErr: "unpack workdir on the instance"},
		{name: "no connection: the step says so", config: "upload: [a.sh]\n", files: []string{"a.sh"}, noConn: true, wantErr: "no connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStepRig(t, stepConfig+tc.config, newFakeMarket())
			repo := r.s.RepoDir
			if tc.git {
				gitChange(t, repo, "gpu/kernel.cu")
			}
			for _, f := range tc.files {
				p := filepath.Join(repo, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(f+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := Freeze.Do(context.Background(), r.s); err != nil {
				t.Fatal(err)
			}
			up := &fakeUploader{repo: repo, fail: tc.fail, outputErr: tc.outErr}
			if !tc.noConn {
				r.s.uploadTo = up
			}
			r.s.Inst = provider.Instance{ID: 101}
			err := Upload.Do(context.Background(), r.s)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("upload: %v", err)
				}
			} else {
				var se *StepError
				if !errors.As(err, &se) || se.Step != "upload" || se.Instance != 101 || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("upload: %v, want the upload step's error on 101 naming %q", err, tc.wantErr)
				}
			}
			if !slices.Equal(up.copies, tc.want) {
				t.Fatalf("copies %q, want %q", up.copies, tc.want)
			}
			for i, want := range tc.wantRun {
				if len(up.scripts) != 1 || !strings.Contains(up.scripts[0], want) || (i > 0 && strings.Index(up.scripts[0], want) < strings.Index(up.scripts[0], tc.wantRun[i-1])) {
					t.Fatalf("scripts %q, want %q in order", up.scripts, tc.wantRun)
				}
			}
			if len(tc.wantRun) == 0 && len(up.scripts) != 0 {
				t.Fatalf("ran %q on the instance", up.scripts)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
			// Repeated by every controller: a connection is this process's.
			if Upload.Done(r.s) {
				t.Fatal("upload is Done")
			}
			if c := r.m.calls(); len(c) != 0 {
				t.Fatalf("the upload called the market: %v", c)
			}
		})
	}
}
