package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/redact/redacttest"
)

// echoFormsEnv switches the test binary into the workload of
// FuzzWorkloadSecrets (see TestMain).
const echoFormsEnv = "VASTRUN_TEST_ECHO_FORMS"

// echoForms is a workload that leaks $FUZZ_SECRET in every form it can
// take: raw, JSON-escaped, URL-encoded (Go's, Python's quote,
// encodeURIComponent), base64 (at each byte offset, wrapped like
// base64(1)), hex (bare, upper case, spaced like od), shell-quoted (POSIX
// and bash's printf %q), HTML-escaped, and base64 of a JSON line; each
// line in two writes on stdout or stderr in turn, a line of the other
// stream after it (they are one pipe on the instance); and in its JSON
// result, as a value and as a key.
func echoForms() int {
	s := os.Getenv("FUZZ_SECRET")
	j, _ := json.Marshal(s)
	line, _ := json.Marshal(map[string]any{"step": 1, "note": s})
	var wrapped strings.Builder
	b64 := base64.StdEncoding.EncodeToString([]byte("k=" + s + "\n"))
	for i := 0; i < len(b64); i += 76 {
		wrapped.WriteString(b64[i:min(i+76, len(b64))] + "\n")
	}
	var od strings.Builder
	for i, c := range []byte(s) {
		fmt.Fprintf(&od, " %02x", c)
		if i%16 == 15 {
			od.WriteByte('\n')
		}
	}
	quote := func(safe string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(safe, c) >= 0) {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	forms := []string{s, string(j), url.QueryEscape(s), url.PathEscape(s), wrapped.String(),
		"'" + strings.ReplaceAll(s, "'", `'\''`) + "'", base64.RawURLEncoding.EncodeToString([]byte("x" + s)),
		base64.StdEncoding.EncodeToString([]byte("xy" + s)), hex.EncodeToString([]byte(s)), strings.ToUpper(hex.EncodeToString([]byte("a" + s))),
		od.String(), quote("/_.-~"), quote("-_.!~*'()"), html.EscapeString(s), base64.StdEncoding.EncodeToString(append(line, '\n'))}
	if out, err := exec.Command("bash", "-c", `printf '%q' "$FUZZ_SECRET"`).Output(); err == nil {
		forms = append(forms, string(out))
	}
	for i, f := range forms {
		text := fmt.Sprintf("form %d: %s\n", i, f)
		one, other := os.Stdout, os.Stderr
		if i%2 == 1 {
			one, other = other, one
		}
		one.WriteString(text[:len(text)/2])
		one.WriteString(text[len(text)/2:])
		other.WriteString("(the other stream)\n")
	}
	fmt.Fprintf(os.Stdout, "forms: %d\n", len(forms))
	res, _ := json.Marshal(map[string]any{"secret": s, s: "as a key", "nested": map[string]any{"list": []any{s, "x" + s}}, "passed": 1})
	if err := os.WriteFile(os.Getenv("VASTRUN_RESULT"), res, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// FuzzWorkloadSecrets runs whole `vastrun ci --sim` runs whose workload
// echoes a random declared secret in every form, and asserts that no
// artifact (stdout, stderr, evidence, journal, state) shows any form of it
// (redacttest.Leak). Its seeds run with the tests. Under -fuzz, Go's
// worker gives each input 10 s before it panics ("deadlocked!",
// internal/fuzz), which a whole run on a loaded 2-core machine can pass:
// CI runs random secrets through TestWorkloadSecretsRandom instead.
func FuzzWorkloadSecrets(f *testing.F) {
	exe, err := os.Executable()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"CANARYML_first_a1b2\nCANARYML_second_c3d4", `CANARYJS<x>&"q"\z_5e6f`, "ünï☃ \t'\"$`\\\\\r\nend", "`\\\\\r\nend"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, secret string) { checkWorkloadSecret(t, exe, secret) })
}

// TestWorkloadSecretsRandom runs VASTRUN_SECRETS_RANDOM (default 0: not
// run) random secrets through whole runs, as FuzzWorkloadSecrets does for
// one: quotes, slashes, backslashes, whitespace, CR and LF, non-ASCII.
// VASTRUN_SECRETS_SEED repeats a run's secrets (the seed is logged).
func TestWorkloadSecretsRandom(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("VASTRUN_SECRETS_RANDOM"))
	if n <= 0 {
		t.Skip("VASTRUN_SECRETS_RANDOM is not set (.ci/run sets it)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := strconv.ParseUint(os.Getenv("VASTRUN_SECRETS_SEED"), 10, 64)
	if err != nil {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("VASTRUN_SECRETS_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	alphabet := []rune("abcXYZ0189_-+/=.~ \t\r\n'\"`$\\<>&%?#{}[]!*()éü☃中🙂")
	for i := range n {
		r := make([]rune, 8+rng.IntN(90))
		for j := range r {
			r[j] = alphabet[rng.IntN(len(alphabet))]
		}
		secret := string(r)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			t.Logf("secret %q", secret)
			checkWorkloadSecret(t, exe, secret)
		})
	}
}

// checkWorkloadSecret runs one whole simulated run whose workload echoes
// secret in every form, and fails on any form of it in any artifact.
func checkWorkloadSecret(t *testing.T, exe, secret string) {
	// An environment variable cannot hold NUL, and the preflight
	// refuses secrets under 8 bytes.
	if len(secret) < 8 || len(secret) > 300 || strings.ContainsRune(secret, 0) {
		return
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`image: ghcr.io/acme/gpu-test@sha256:%s
test: %q
secrets: [FUZZ_SECRET]
env:
  %s: "1"
gpu:
  max_dph: 1.0
budget:
  max_spend: 5
timeouts:
  ready: 2m
  job: 1m
  teardown: 20s
`, strings.Repeat("0123456789abcdef", 4), exe, echoFormsEnv)
	if err := os.WriteFile(filepath.Join(dir, "vastrun.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FUZZ_SECRET": secret}
	var out, errOut bytes.Buffer
	fa := &Factory{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Getenv: func(k string) string { return env[k] }, HomeDir: dir,
		Clock: clock.NewScaled(time.Now(), 120)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := Run(ctx, fa, []string{"ci", "--sim", "--yes", "-f", filepath.Join(dir, "vastrun.yaml"),
		"--state-dir", filepath.Join(dir, "state"), "--evidence-dir", filepath.Join(dir, "ev"), "--json"})
	if redact.Unmaskable(secret) {
		// Refused by the preflight before anything is rented, without
		// showing the secret.
		if code == 0 {
			t.Fatal("a secret whose every line is too short to mask was accepted")
		}
		if bytes.Contains(errOut.Bytes(), []byte(secret)) || bytes.Contains(out.Bytes(), []byte(secret)) {
			t.Fatal("the refusal showed the secret")
		}
		return
	}
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	artifacts := map[string][]byte{"stdout": out.Bytes(), "stderr": errOut.Bytes()}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && filepath.Base(p) != "vastrun.yaml" {
			artifacts[p], _ = os.ReadFile(p)
		}
		return nil
	})
	if !bytes.Contains(artifacts[filepath.Join(dir, "ev", "test.log")], []byte("forms: ")) {
		t.Fatalf("the workload did not run to the end:\n%s", artifacts[filepath.Join(dir, "ev", "test.log")])
	}
	forms, err := redacttest.ValueForms([]string{secret})
	if err != nil {
		t.Fatal(err)
	}
	check := redacttest.NewLeak(secret, forms[0])
	for name, b := range artifacts {
		if bad := check.Find(b); bad != "" {
			t.Fatalf("%s shows %s:\n%s", name, bad, b)
		}
	}
}
