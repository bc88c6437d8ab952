package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/vastrun/vastrun/internal/redact"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// echoFormsEnv switches the test binary into the workload of
// FuzzWorkloadSecrets (see TestMain).
const echoFormsEnv = "VASTRUN_TEST_ECHO_FORMS"

// echoForms is a workload that leaks $FUZZ_SECRET in every form it can
// take: raw, JSON-escaped, URL-encoded, base64 (wrapped like base64(1)),
// shell-quoted (POSIX and bash's printf %q), on stdout and stderr, and in
// its JSON result, as a value and as a key.
func echoForms() int {
	s := os.Getenv("FUZZ_SECRET")
	j, _ := json.Marshal(s)
	b64 := base64.StdEncoding.EncodeToString([]byte(s + "\n"))
	var wrapped strings.Builder
	for i := 0; i < len(b64); i += 76 {
		wrapped.WriteString(b64[i:min(i+76, len(b64))] + "\n")
	}
	forms := []string{s, string(j), url.QueryEscape(s), url.PathEscape(s), wrapped.String(),
		"'" + strings.ReplaceAll(s, "'", `'\''`) + "'", base64.RawURLEncoding.EncodeToString([]byte("x" + s))}
	if out, err := exec.Command("bash", "-c", `printf '%q' "$FUZZ_SECRET"`).Output(); err == nil {
		forms = append(forms, string(out))
	}
	for i, f := range forms {
		fmt.Fprintf(os.Stdout, "form %d: %s\n", i, f)
		fmt.Fprintf(os.Stderr, "form %d: %s\n", i, f)
	}
	res, _ := json.Marshal(map[string]any{"secret": s, s: "as a key", "nested": map[string]any{"list": []any{s, "x" + s}}, "passed": 1})
	if err := os.WriteFile(os.Getenv("VASTRUN_RESULT"), res, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// FuzzWorkloadSecrets runs whole `vastrun ci --sim` runs whose workload
// echoes a random declared secret in every form, and asserts that no
// artifact (stdout, stderr, evidence, journal, state) holds the secret, a
// line of it, or an encoding of it.
func FuzzWorkloadSecrets(f *testing.F) {
	exe, err := os.Executable()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"CANARYML_first_a1b2\nCANARYML_second_c3d4", `CANARYJS<x>&"q"\z_5e6f`, "ünï☃ \t'\"$`\\\\\r\nend", "`\\\\\r\nend"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, secret string) {
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
		if !bytes.Contains(artifacts[filepath.Join(dir, "ev", "test.log")], []byte("form 7: ")) {
			t.Fatalf("the workload did not run to the end:\n%s", artifacts[filepath.Join(dir, "ev", "test.log")])
		}
		for name, b := range artifacts {
			if bad := leakedForm(secret, b); bad != "" {
				t.Fatalf("%s holds %q:\n%s", name, bad, b)
			}
		}
	})
}

// leakedForm returns the form of secret found in b, or "".
func leakedForm(secret string, b []byte) string {
	j, _ := json.Marshal(secret)
	forbidden := []string{secret, string(j[1 : len(j)-1]), url.QueryEscape(secret), url.PathEscape(secret)}
	for _, line := range strings.FieldsFunc(secret, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l := strings.TrimSpace(line); len(l) >= 8 {
			forbidden = append(forbidden, l)
		}
	}
	for _, f := range forbidden {
		if len(f) >= 8 && bytes.Contains(b, []byte(f)) {
			return f
		}
	}
	aligned := base64.StdEncoding.EncodeToString([]byte(secret[:len(secret)/3*3]))
	if bytes.Contains(bytes.ReplaceAll(b, []byte("\n"), nil), []byte(aligned)) {
		return aligned
	}
	return ""
}
