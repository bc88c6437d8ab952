package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/redact/redacttest"
)

// TestMain registers the real entry point as the "vastrun" command of the
// testscript scenarios in testdata/script.
func TestMain(m *testing.M) {
	if os.Getenv(echoFormsEnv) != "" {
		os.Exit(echoForms())
	}
	scenarioParallelism()
	testscript.Main(m, map[string]func(){
		"vastrun": func() { os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// scenarioParallel is how many scenarios run at once unless -parallel is
// given. The scenarios wait on simulated time, remote commands and child
// processes far more than they compute (about half a core on average
// across the whole set), so go test's default of GOMAXPROCS (2 on CI)
// left CI's cores mostly idle and the package close to its timeout.
const scenarioParallel = 8

func scenarioParallelism() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	for _, a := range os.Args[1:] {
		given = given || strings.HasPrefix(strings.TrimLeft(a, "-"), "test.parallel")
	}
	if f := flag.Lookup("test.parallel"); f != nil && !given {
		if err := f.Value.Set(strconv.Itoa(max(scenarioParallel, runtime.GOMAXPROCS(0)))); err != nil {
			panic(err)
		}
	}
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "../../testdata/script",
		Setup: func(e *testscript.Env) error {
			// Scripts must never reach the real API or read a real key.
			e.Setenv("HOME", e.WorkDir)
			e.Setenv("VAST_API_KEY", "")
			e.Setenv("VAST_URL", "http://127.0.0.1:1")
			e.Setenv("GITHUB_ACTIONS", "")
			// The hand-made fixture repositories canary init is tried on.
			repos, err := filepath.Abs("../../testdata/canary-repos")
			if err != nil {
				return err
			}
			e.Setenv("CANARY_REPOS", repos)
			// The host's docker/podman stays out unless a scenario asks.
			e.Setenv("VASTRUN_CONTAINER_ENGINE", "none")
			e.Values[simKey{}] = &simHolder{}
			return nil
		},
		Condition: scriptCondition,
		Cmds:      map[string]func(ts *testscript.TestScript, neg bool, args []string){"sim": cmdSim, "webhook": cmdWebhook, "ckpt": cmdCkpt, "freeport": cmdFreeport, "envfile": cmdEnvFile, "registry": cmdRegistry, "ocilayout": cmdOCILayout, "repocopy": cmdRepoCopy, "simtouch": cmdSimTouch, "pty": cmdPty, "simready": cmdSimReady, "planage": cmdPlanAge, "jsonschema": cmdJSONSchema, "noforms": cmdNoForms, "s3": cmdS3, "teams3": cmdTeamS3, "s3proxy": cmdS3Proxy, "fakes3": cmdFakeS3, "staticvastrun": cmdStaticVastrun},
	})
}

type simKey struct{}

// simHolder carries a script's simulator between its commands, and the
// count of the API calls that reached it.
type simHolder struct {
	s     *sim.Server
	calls apiCalls
}

// apiCalls counts API calls by kind: "delete-one" (DELETE of one
// instance), "delete-bulk" (the bulk destroy), "show", "list" (a page of
// the instance listing) and "other".
type apiCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *apiCalls) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			one := strings.HasPrefix(r.URL.Path, "/api/v0/instances/") && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 3
			kind := "other"
			switch {
			case one && r.Method == http.MethodDelete:
				kind = "delete-one"
			case one && r.Method == http.MethodGet:
				kind = "show"
			case r.URL.Path == "/api/v0/instances/" && r.Method == http.MethodDelete:
				kind = "delete-bulk"
			case r.URL.Path == "/api/v1/instances/":
				kind = "list"
			}
			c.mu.Lock()
			if c.n == nil {
				c.n = map[string]int{}
			}
			c.n[kind]++
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// String is the counts as "delete-one=N delete-bulk=N show=N list=N
// other=N", for a script to match.
func (c *apiCalls) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, k := range []string{"delete-one", "delete-bulk", "show", "list", "other"} {
		fmt.Fprintf(&b, "%s=%d ", k, c.n[k])
	}
	return strings.TrimSpace(b.String())
}

func scriptSim(ts *testscript.TestScript) *sim.Server {
	s := ts.Value(simKey{}).(*simHolder).s
	if s == nil {
		ts.Fatalf("no simulator started (use: sim start KEY)")
	}
	return s
}

// cmdSim drives a simulator from a script:
//
//	sim start KEY [SPEED]   serve a simulator accepting KEY; sets VAST_URL
//	sim live N              assert N live (not destroyed) instances
//	sim rented N            assert N instances were ever rented
//	sim wait-live N         wait (up to waitLimit) until N instances are live
//	sim wait-file NAME [N]  wait until N live instances' workspaces (1) have NAME
//	sim fault JSON          inject a fault (see sim.Fault); {live} is the newest live instance's id
//	sim label               set $LABEL to the newest instance's label
//	sim call METHOD PATH [BODY]  one raw API call; prints "STATUS BODY"
//	sim private REPO U T    make REPO private to user U with token T
//	sim ssh-faults N        assert N ssh_drop/ssh_stall faults acted
//	sim destroyed-by KIND   assert every destroyed instance (one at least) was
//	                        destroyed by a call with KIND of key
//	                        (container_api_key or account_key)
//	sim cat NAME            print NAME from the newest instance's workspace,
//	                        live or destroyed (e.g. .vastrun/agent.log)
//	sim calls [reset]       print the API calls made since the start (or the
//	                        last reset) by kind (apiCalls), or reset them
func cmdSim(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: sim start|live|rented|wait-live|wait-file|fault|label ...")
	}
	switch args[0] {
	case "start":
		speed := 60.0
		if len(args) > 2 {
			speed, _ = strconv.ParseFloat(args[2], 64)
		}
		s, err := sim.New(sim.Config{APIKey: args[1], Clock: clock.NewScaled(time.Now(), speed)})
		ts.Check(err)
		h := ts.Value(simKey{}).(*simHolder)
		srv := httptest.NewServer(h.calls.wrap(s))
		ts.Defer(func() { srv.Close(); s.Close() })
		ts.Setenv("VAST_URL", srv.URL)
		h.s = s
	case "calls":
		h := ts.Value(simKey{}).(*simHolder)
		if len(args) > 1 && args[1] == "reset" {
			h.calls.mu.Lock()
			h.calls.n = nil
			h.calls.mu.Unlock()
			return
		}
		fmt.Fprintln(ts.Stdout(), h.calls.String())
	case "live", "rented":
		want, err := strconv.Atoi(args[1])
		ts.Check(err)
		st := scriptSim(ts).Snapshot()
		got := len(st.Live)
		if args[0] == "rented" {
			got += len(st.Gone)
		}
		if (got == want) == neg {
			ts.Fatalf("%s instances: got %d, want %s%d (live: %+v)", args[0], got, map[bool]string{true: "not ", false: ""}[neg], want, st.Live)
		}
	case "wait-live":
		want, _ := strconv.Atoi(args[1])
		waitFor(ts, func() bool { return len(scriptSim(ts).Snapshot().Live) == want }, "live instances to be "+args[1])
	case "wait-file":
		// sim wait-file NAME [N]: until N live instances (1) have NAME.
		want := 1
		if len(args) > 2 {
			want, _ = strconv.Atoi(args[2])
		}
		waitFor(ts, func() bool {
			n := 0
			for _, in := range scriptSim(ts).Snapshot().Live {
				if _, err := os.Stat(filepath.Join(in.Sandbox, "workspace", args[1])); err == nil {
					n++
				}
			}
			return n >= want
		}, "file "+args[1]+" on a live instance")
	case "fault":
		// {live} in the JSON is the newest live instance's id.
		var newest int64
		for _, in := range scriptSim(ts).Snapshot().Live {
			newest = max(newest, in.ID)
		}
		var f sim.Fault
		ts.Check(json.Unmarshal([]byte(strings.ReplaceAll(args[1], "{live}", strconv.FormatInt(newest, 10))), &f))
		ts.Check(scriptSim(ts).Inject(f))
	case "private":
		scriptSim(ts).SetPrivateImage(args[1], args[2], args[3])
	case "preempt":
		live := scriptSim(ts).Snapshot().Live
		if len(live) != 1 {
			ts.Fatalf("sim preempt: want exactly one live instance, have %d", len(live))
		}
		ts.Check(scriptSim(ts).Inject(sim.Fault{Kind: sim.FaultPreempt, Instance: live[0].ID}))
	case "ssh-faults":
		want, err := strconv.Atoi(args[1])
		ts.Check(err)
		if got := scriptSim(ts).Snapshot().SSHFaultsFired; (got == want) == neg {
			ts.Fatalf("ssh faults fired: got %d, want %s%d", got, map[bool]string{true: "not ", false: ""}[neg], want)
		}
	case "destroyed-by":
		gone := scriptSim(ts).Snapshot().Gone
		ok := len(gone) > 0
		for _, in := range gone {
			ok = ok && in.DestroyedBy == args[1]
		}
		if ok == neg {
			ts.Fatalf("destroyed instances: want %sall destroyed by %s: %+v", map[bool]string{true: "not ", false: ""}[neg], args[1], gone)
		}
	case "cat":
		st := scriptSim(ts).Snapshot()
		var newest *sim.InstanceState
		for _, in := range append(st.Gone, st.Live...) {
			if newest == nil || in.ID > newest.ID {
				newest = &in
			}
		}
		if newest == nil {
			ts.Fatalf("sim cat: nothing was rented")
		}
		b, err := os.ReadFile(filepath.Join(newest.Sandbox, "workspace", args[1]))
		ts.Check(err)
		ts.Stdout().Write(b)
	case "label":
		st := scriptSim(ts).Snapshot()
		all := append(st.Gone, st.Live...)
		if len(all) == 0 {
			ts.Fatalf("sim label: nothing was rented")
		}
		newest := all[0]
		for _, in := range all {
			if in.ID > newest.ID {
				newest = in
			}
		}
		ts.Setenv("LABEL", newest.Label)
	case "call":
		// sim call METHOD PATH [BODY]: one raw API call with $VAST_API_KEY,
		// printing "STATUS BODY" to stdout, for answers whose wire form is
		// the fact; it sets $CALL_ID. {live} in PATH or BODY is the newest live instance's id.
		if len(args) < 3 {
			ts.Fatalf("usage: sim call METHOD PATH [BODY]")
		}
		var newest int64
		for _, in := range scriptSim(ts).Snapshot().Live {
			newest = max(newest, in.ID)
		}
		sub := func(v string) string { return strings.ReplaceAll(v, "{live}", strconv.FormatInt(newest, 10)) }
		body := "{}"
		if len(args) > 3 {
			body = sub(args[3])
		}
		req, err := http.NewRequest(args[1], ts.Getenv("VAST_URL")+sub(args[2]), strings.NewReader(body))
		ts.Check(err)
		req.Header.Set("Authorization", "Bearer "+ts.Getenv("VAST_API_KEY"))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		ts.Check(err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Fprintf(ts.Stdout(), "%d %s\n", res.StatusCode, strings.TrimSpace(string(b)))
		// $CALL_ID is the first "id" the answer names (an offer's, a
		// contract's), for the next call.
		if m := callID.FindSubmatch(b); m != nil {
			ts.Setenv("CALL_ID", string(m[1]))
		}
	default:
		ts.Fatalf("unknown sim subcommand %q", args[0])
	}
}

var callID = regexp.MustCompile(`"(?:id|new_contract)":\s*([0-9]+)`)

// waitLimit bounds a script's wait for a condition. It only ends a wait
// that is stuck: a loaded runner took more than 20 s to commit two
// checkpoints (receipt_story failed so at a load average of 20).
const waitLimit = 3 * time.Minute

// waitFor polls a real server in real time (the process under test runs
// on its own); it gives up after waitLimit.
func waitFor(ts *testscript.TestScript, cond func() bool, what string) {
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	ts.Fatalf("timed out waiting %s for %s", waitLimit, what)
}

type hookRecorder struct {
	mu     sync.Mutex
	bodies []string
}

// cmdWebhook records alert webhooks:
//
//	webhook start        serve a receiver; sets VASTRUN_ALERT_WEBHOOK
//	webhook received N   assert N alerts; prints them to stdout
//	webhook all          print every body received so far, one a line
func cmdWebhook(ts *testscript.TestScript, neg bool, args []string) {
	switch args[0] {
	case "start":
		rec := &hookRecorder{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			rec.mu.Lock()
			rec.bodies = append(rec.bodies, string(b))
			rec.mu.Unlock()
		}))
		ts.Defer(srv.Close)
		ts.Setenv("VASTRUN_ALERT_WEBHOOK", srv.URL)
		ts.Setenv("WEBHOOK_ID", fmt.Sprint(len(hooks)))
		hooksMu.Lock()
		hooks = append(hooks, rec)
		hooksMu.Unlock()
	case "received", "all":
		if args[0] == "all" {
			args = append(args, "0")
		}
		id, _ := strconv.Atoi(ts.Getenv("WEBHOOK_ID"))
		hooksMu.Lock()
		rec := hooks[id]
		hooksMu.Unlock()
		want, _ := strconv.Atoi(args[1])
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if args[0] == "all" {
			want = len(rec.bodies)
		}
		if len(rec.bodies) != want {
			ts.Fatalf("webhook received %d alerts, want %d", len(rec.bodies), want)
		}
		for _, b := range rec.bodies {
			fmt.Fprintln(ts.Stdout(), b)
		}
	}
}

var (
	hooksMu sync.Mutex
	hooks   []*hookRecorder
)

// cmdCkpt inspects a file:// checkpoint store from a script:
//
//	ckpt wait N DIR     wait until a run under DIR has N committed checkpoints
//	ckpt corrupt DIR    flip the bytes of the newest committed checkpoint's files
func cmdCkpt(ts *testscript.TestScript, neg bool, args []string) {
	committed := func(root string) []string {
		var dirs []string
		matches, _ := filepath.Glob(filepath.Join(ts.MkAbs(root), "*", "checkpoints", "*", "COMMITTED"))
		for _, m := range matches {
			dirs = append(dirs, filepath.Dir(m))
		}
		sort.Strings(dirs)
		return dirs
	}
	switch args[0] {
	case "wait":
		n, _ := strconv.Atoi(args[1])
		waitFor(ts, func() bool { return len(committed(args[2])) >= n }, args[1]+" committed checkpoints")
	case "corrupt":
		dirs := committed(args[1])
		if len(dirs) == 0 {
			ts.Fatalf("ckpt corrupt: nothing committed under %s", args[1])
		}
		newest := dirs[len(dirs)-1]
		filepath.Walk(filepath.Join(newest, "files"), func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				b, _ := os.ReadFile(p)
				for i := range b {
					b[i] ^= 0xff
				}
				os.WriteFile(p, b, 0o644)
			}
			return nil
		})
		fmt.Fprintln(ts.Stdout(), "corrupted", filepath.Base(newest))
	default:
		ts.Fatalf("unknown ckpt subcommand %q", args[0])
	}
}

// cmdFreeport sets $NAME to a loopback TCP port that was free a moment ago
// (for a -L forward's local end):
//
//	freeport NAME
func cmdFreeport(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: freeport NAME")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ts.Setenv(args[0], strconv.Itoa(port))
}

// cmdNoForms asserts that no form of the secret in $NAME shows in any file
// under the paths named (files, or directories walked): raw, a 12-byte
// piece of it, its JSON, URL, HTML and shell escapes as Python prints
// them, its hex, or the stable middle of its base64 (redacttest.Leak).
//
//	noforms NAME PATH...
func cmdNoForms(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: noforms NAME PATH...")
	}
	secret := ts.Getenv(args[0])
	if len(secret) < 8 {
		ts.Fatalf("noforms: $%s is not a secret (under 8 bytes)", args[0])
	}
	forms, err := redacttest.ValueForms([]string{secret})
	ts.Check(err)
	check := redacttest.NewLeak(secret, forms[0])
	files := 0
	for _, root := range args[1:] {
		err := filepath.Walk(ts.MkAbs(root), func(p string, info os.FileInfo, err error) error {
			if err != nil || !info.Mode().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files++
			if bad := check.Find(b); bad != "" {
				ts.Fatalf("noforms: %s shows %s (secret %q)", p, bad, secret)
			}
			return nil
		})
		ts.Check(err)
	}
	if files == 0 {
		ts.Fatalf("noforms: no file under %v", args[1:])
	}
	ts.Logf("noforms: %d files, no form of $%s", files, args[0])
}

// cmdEnvFile sets a variable to a file's content (without its final
// newline), for values testscript cannot spell, such as multi-line ones:
//
//	envfile NAME FILE
func cmdEnvFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: envfile NAME FILE")
	}
	b, err := os.ReadFile(ts.MkAbs(args[1]))
	ts.Check(err)
	ts.Setenv(args[0], strings.TrimSuffix(string(b), "\n"))
}
