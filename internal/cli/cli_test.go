package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, ctx context.Context, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{
		IO:      &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Getenv:  func(k string) string { return env[k] },
		HomeDir: t.TempDir(),
		Clock:   instantClock{},
	}
	code := Run(ctx, f, args)
	return result{code, out.String(), errOut.String()}
}

func newSimServer(t *testing.T) (*sim.Server, *httptest.Server) {
	s, err := sim.New(sim.Config{DisableSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv
}

func TestExitCodesAndHints(t *testing.T) {
	s, srv := newSimServer(t)
	good := map[string]string{"VAST_URL": srv.URL, "VAST_API_KEY": s.APIKey()}
	bad := map[string]string{"VAST_URL": srv.URL, "VAST_API_KEY": "deadbeef" + strings.Repeat("0", 56)}
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		inStderr []string
	}{
		{"ok", good, []string{"offers", "num_gpus=1"}, ExitOK, nil},
		{"bad query names token and suggests", good, []string{"offers", "gpu_nme=RTX_4090"}, ExitUsage, []string{`"gpu_nme"`, "did you mean gpu_name?", "hint:"}},
		{"bad operator", good, []string{"offers", "num_gpus=>2"}, ExitUsage, []string{"unknown operator", "operators:"}},
		{"bad order", good, []string{"offers", "-o", "price"}, ExitUsage, []string{"price"}},
		{"unknown flag", good, []string{"offers", "--bogus"}, ExitUsage, []string{"unknown flag", "hint: see 'vastrun offers --help'"}},
		{"bad limit", good, []string{"offers", "--limit", "0"}, ExitUsage, []string{"--limit"}},
		{"no key", map[string]string{}, []string{"offers"}, ExitAuth, []string{"VAST_API_KEY", "--sim"}},
		{"bad key", bad, []string{"offers", "num_gpus=1"}, ExitAuth, []string{"Invalid user key", "hint: check VAST_API_KEY"}},
		{"bad url", map[string]string{"VAST_API_KEY": "k", "VAST_URL": "console.vast.ai"}, []string{"offers"}, ExitUsage, []string{"not an http(s) URL"}},
		{"unreachable", map[string]string{"VAST_API_KEY": "k", "VAST_URL": "http://127.0.0.1:1"}, []string{"offers"}, ExitUnavailable, []string{"hint: check the network"}},
		{"version takes no args", good, []string{"version", "x"}, ExitUsage, []string{"unknown command"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, context.Background(), c.env, c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", r.code, c.code, r.stderr)
			}
			for _, want := range c.inStderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			if key := c.env["VAST_API_KEY"]; len(key) > 8 && (strings.Contains(r.stderr, key) || strings.Contains(r.stdout, key)) {
				t.Fatal("the API key was printed")
			}
		})
	}
}

func TestOffersTableAndJSON(t *testing.T) {
	s, srv := newSimServer(t)
	env := map[string]string{"VAST_URL": srv.URL, "VAST_API_KEY": s.APIKey()}
	r := runCLI(t, context.Background(), env, "offers", "gpu_name=RTX_4090 num_gpus=1", "-o", "dph_total")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ID") || !strings.Contains(r.stdout, "RTX 4090 x1") || strings.Contains(r.stdout, "H200") {
		t.Fatalf("table: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "vastrun:") {
		t.Fatal("messages for people leaked into stdout")
	}
	r = runCLI(t, context.Background(), env, "offers", "num_gpus>=2", "-o", "dph_total", "--limit", "7", "--json", "--disk", "50")
	var doc offersJSON
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("json: %v %d %s", err, r.code, r.stdout)
	}
	if doc.Schema != "vastrun.offers/v1" || doc.Simulated || doc.DiskGB != 50 || len(doc.Offers) != 7 {
		t.Fatalf("json doc: %+v", doc)
	}
	for i, o := range doc.Offers {
		if o.NumGPUs < 2 || (i > 0 && doc.Offers[i-1].DPHTotal > o.DPHTotal) {
			t.Fatalf("offer %d breaks filter/order: %+v", i, o)
		}
		if want := o.DPHBase + o.StorageDPH; fmt.Sprintf("%.5f", want) != fmt.Sprintf("%.5f", o.DPHTotal) {
			t.Fatalf("price components do not add up: %+v", o)
		}
	}
}

func TestOffersSimFlagSaysSo(t *testing.T) {
	r := runCLI(t, context.Background(), map[string]string{}, "offers", "--sim", "gpu_name=RTX_4090 num_gpus=1", "--json")
	var doc offersJSON
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("%v %d %s %s", err, r.code, r.stdout, r.stderr)
	}
	if !doc.Simulated || len(doc.Offers) == 0 || !strings.Contains(r.stderr, "embedded simulator") {
		t.Fatalf("--sim output must say it is simulated: %+v\n%s", doc, r.stderr)
	}
}

func TestNewCmdOffersParsesFlags(t *testing.T) {
	f := &Factory{IO: &IOStreams{Out: io.Discard, ErrOut: io.Discard}}
	var got *OffersOptions
	cmd := NewCmdOffers(f, func(_ context.Context, o *OffersOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"gpu_name=A100_SXM4", "num_gpus>=2", "-o", "dph_total", "--limit", "3", "--type", "interruptible", "--disk", "40", "--no-default"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Query != "gpu_name=A100_SXM4 num_gpus>=2" || got.Order != "dph_total" || got.Limit != 3 || got.Type != "interruptible" || got.DiskGB != 40 || !got.NoDefaults {
		t.Fatalf("options: %+v", got)
	}
}

func TestVersionJSON(t *testing.T) {
	r := runCLI(t, context.Background(), nil, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Schema != "vastrun.version/v1" || v.Version == "" {
		t.Fatalf("%v %+v", err, v)
	}
}

// TestSimServe is the acceptance check: the served simulator answers
// curl-style requests with a Bearer key and with ?api_key=, a bad key gets
// 404 auth_error, and SSH to a running instance prints nvidia-smi naming the
// rented GPU.
func TestSimServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := filepath.Join(t.TempDir(), "ready.json")
	done := make(chan result, 1)
	go func() {
		done <- runCLI(t, ctx, nil, "sim", "serve", "--ready-file", ready, "--speed", "200", "--sim-key", "simkey123")
	}()
	var info simServeJSON
	for i := 0; ; i++ {
		b, err := os.ReadFile(ready)
		if err == nil && json.Unmarshal(b, &info) == nil {
			break
		}
		if i > 500 {
			t.Fatal("sim serve never became ready")
		}
		time.Sleep(10 * time.Millisecond) // waiting on a real server process, not simulated time
	}
	if info.APIKey != "simkey123" || !strings.HasPrefix(info.URL, "http://127.0.0.1:") {
		t.Fatalf("ready info: %+v", info)
	}
	status := func(url, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := status(info.URL+"/api/v0/users/current/", "simkey123"); code != 200 || !strings.Contains(body, "credit") {
		t.Fatalf("Bearer: %d %s", code, body)
	}
	if code, _ := status(info.URL+"/api/v0/users/current/?api_key=simkey123", ""); code != 200 {
		t.Fatalf("?api_key=: %d", code)
	}
	if code, body := status(info.URL+"/api/v0/users/current/", "wrong"); code != 404 || !strings.Contains(body, "auth_error") {
		t.Fatalf("bad key: %d %s", code, body)
	}

	c, err := vast.New(vast.Options{BaseURL: info.URL, APIKey: info.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := vast.ParseQuery("gpu_name=H100_SXM num_gpus=1", vast.QueryOptions{Order: "dph_total"})
	offers, err := c.SearchOffers(ctx, q)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	res, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "nvidia/cuda:12.4.0-base-ubuntu22.04", DiskGB: 10, Label: "serve-test"})
	if err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	if err := c.AttachSSHKey(ctx, res.InstanceID, string(gossh.MarshalAuthorizedKey(signer.PublicKey()))); err != nil {
		t.Fatal(err)
	}
	var inst provider.Instance
	for i := 0; ; i++ { // 10 simulated seconds at 200x is 50 ms
		inst, err = c.ShowInstance(ctx, res.InstanceID)
		if err == nil && inst.Running() {
			break
		}
		if i > 300 {
			t.Fatalf("never running: %+v %v", inst, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ep := inst.SSHEndpoints()[0]
	client, err := gossh.Dial("tcp", fmt.Sprintf("%s:%d", ep.Host, ep.Port), &gossh.ClientConfig{
		User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := client.NewSession()
	out, err := sess.Output("nvidia-smi")
	client.Close()
	if err != nil || !strings.Contains(string(out), "NVIDIA H100 80GB HBM3") {
		t.Fatalf("nvidia-smi over SSH: %v\n%s", err, out)
	}
	if err := c.DestroyInstance(ctx, res.InstanceID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShowInstance(ctx, res.InstanceID); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("after destroy: %v", err)
	}
	cancel()
	r := <-done
	if r.code != 0 || !strings.Contains(r.stdout, "export VAST_URL=") || !strings.Contains(r.stderr, "0 instances were still live") {
		t.Fatalf("sim serve exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestSimServeRefusesNonLoopback(t *testing.T) {
	r := runCLI(t, context.Background(), nil, "sim", "serve", "--listen", "0.0.0.0:0")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "loopback") {
		t.Fatalf("%d %s", r.code, r.stderr)
	}
}

// instantClock makes retry backoff free: tests never wait on the wall clock.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }
func (instantClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

// TestVersionStamped: the values a release stamps with -ldflags win over the
// toolchain's VCS stamp, in both the JSON and the text form.
func TestVersionStamped(t *testing.T) {
	oldV, oldC, oldD := Version, Commit, Date
	t.Cleanup(func() { Version, Commit, Date = oldV, oldC, oldD })
	Version, Commit, Date = "1.2.3", "0123abc", "2026-12-01T00:00:00Z"
	r := runCLI(t, context.Background(), nil, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Version != "1.2.3" || v.Commit != "0123abc" || v.Date != "2026-12-01T00:00:00Z" {
		t.Fatalf("%v %+v", err, v)
	}
	r = runCLI(t, context.Background(), nil, "version")
	if !strings.Contains(r.stdout, "vastrun 1.2.3 (go") || !strings.Contains(r.stdout, "commit 0123abc, built 2026-12-01T00:00:00Z") {
		t.Fatalf("text form: %q", r.stdout)
	}
}
