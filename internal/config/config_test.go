package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const good = `
version: 1
image: ghcr.io/acme/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
test: ./gpu-test.sh
upload: [gpu-test.sh]
gate: ["go vet ./..."]
paths: ["gpu/**"]
gpu:
  models: [RTX_4090, RTX_3090]
  min_vram_gb: 20
  min_cuda: 12.1
  min_reliability: 0.98
  countries: {allow: [US, CA]}
  disk_gb: 30
  max_dph: 0.6
budget:
  max_spend: 1.5
timeouts:
  ready: 5m
  job: 20m
env: {MODE: fast}
secrets: [HF_TOKEN]
`

func TestParseGood(t *testing.T) {
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.GPU.Count != 1 || !*c.GPU.Verified || c.Timeouts.Ready != Duration(5*time.Minute) || c.Timeouts.Teardown != Duration(DefaultTeardown) || c.Timeouts.HeartbeatTTL != Duration(DefaultHeartbeatTTL) || c.StateDir != ".vastrun" {
		t.Fatalf("defaults: %+v", c)
	}
	p := c.Policy()
	if p.Models[0] != "RTX 4090" || p.DiskGB != 30 || p.MaxDPH != 0.6 || !p.Verified || p.AllowCountries[1] != "CA" {
		t.Fatalf("policy: %+v", p)
	}
}

func TestUnknownKeysAreNamed(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{strings.Replace(good, "max_dph", "max_dhp", 1), `line 15: unknown key "max_dhp" in gpu: did you mean max_dph? (allowed: bid, count, countries, datacenter, disk_gb, interruptible, matrix, matrix_pass, max_bid, max_dph,`},
		{good + "timeoutz: {}\n", `unknown key "timeoutz" at the top level`},
		{strings.Replace(good, "allow:", "alow:", 1), `unknown key "alow" in gpu.countries: did you mean allow? (allowed: allow, deny)`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v\nwant it to contain %s", err, c.want)
		}
	}
}

func TestValidationListsEveryProblem(t *testing.T) {
	_, err := Parse([]byte("version: 2\ngpu: {min_reliability: 2}\nsecrets: ['A=B']\nenv: {STEP_0.02: x}\n"))
	for _, want := range []string{"version 2", "image is required", "test is required", "max_spend", "min_reliability", `"A=B"`, `"STEP_0.02"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	if _, err := Parse([]byte(strings.Replace(good, "ready: 5m", "ready: soon", 1))); err == nil || !strings.Contains(err.Error(), `"soon" is not a duration`) {
		t.Errorf("bad duration: %v", err)
	}
	if _, err := Parse([]byte("")); err == nil {
		t.Error("empty config accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("gpu: {models: [x]}\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil && (c.Image == "" || c.Test == "" || c.Budget.MaxSpend <= 0) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
	})
}

func TestImageLogin(t *testing.T) {
	c, err := Parse([]byte(good + "image_login: {registry: ghcr.io, user_env: REG_USER, token_env: REG_TOKEN}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ImageLogin != (ImageLogin{Registry: "ghcr.io", UserEnv: "REG_USER", TokenEnv: "REG_TOKEN"}) {
		t.Fatalf("%+v", c.ImageLogin)
	}
	for _, tc := range []struct{ extra, want string }{
		{"image_login: {registry: ghcr.io, user_env: REG_USER}\n", "image_login needs registry, user_env and token_env"},
		{"image_login: {registry: ghcr.io, user_env: REG_USER, token_env: ghp_abc-123}\n", "image_login.token_env must be an environment variable name"},
		{"image_login: {registry: docker.io, user_env: U, token_env: T}\n", `image_login.registry "docker.io" is not the image's registry "ghcr.io"`},
		{"image_login: {registry: ghcr.io, user: x}\n", `unknown key "user" in image_login`},
	} {
		_, err := Parse([]byte(good + tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.extra, err, tc.want)
		}
		// A value mistaken for a name is never echoed back.
		if err != nil && strings.Contains(err.Error(), "ghp_abc-123") {
			t.Errorf("the error repeats a token: %v", err)
		}
	}
	for ref, want := range map[string]string{
		"ghcr.io/acme/app@sha256:ab": "ghcr.io", "acme/app:1": "docker.io", "ubuntu": "docker.io",
		"localhost/x:1": "localhost", "127.0.0.1:5000/x:1": "127.0.0.1:5000",
	} {
		if got := ImageRegistry(ref); got != want {
			t.Errorf("ImageRegistry(%q) = %q, want %q", ref, got, want)
		}
	}
}

// Vast's create takes at least 8 GB of disk (vast-api.md §12.4): a smaller
// disk_gb is refused here, naming the minimum, rather than by the create.
func TestDiskUnderVastMinimumIsRefused(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(good, "disk_gb: 30", "disk_gb: 5", 1)))
	if err == nil || !strings.Contains(err.Error(), "gpu.disk_gb 5 is under Vast's minimum disk of 8 GB") {
		t.Fatalf("disk_gb 5: %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(good, "disk_gb: 30", "disk_gb: 8", 1))); err != nil {
		t.Fatalf("disk_gb 8 (the minimum): %v", err)
	}
}

func TestUnknownKeySuggestsTheKeyMeant(t *testing.T) {
	for _, c := range []struct{ yaml, key, want string }{
		{strings.Replace(good, "budget:", "bugdet:", 1), "bugdet", "budget"},
		{strings.Replace(good, "max_dph", "max_dhp", 1), "max_dhp", "max_dph"},
		{strings.Replace(good, "timeouts:", "timeout:", 1), "timeout", "timeouts"},
	} {
		_, err := Parse([]byte(c.yaml))
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != c.key || len(ke.DidYouMean) == 0 || ke.DidYouMean[0] != c.want {
			t.Errorf("%s: err = %v (%#v), want a KeyError suggesting %s", c.key, err, ke, c.want)
			continue
		}
		if !strings.Contains(err.Error(), "did you mean "+c.want+"?") {
			t.Errorf("the message does not say it: %v", err)
		}
	}
}

func TestWrongTypeNamesTheKey(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"disk_gb: 30", "disk_gb: thirty", `gpu.disk_gb is "thirty", but it must be a number`},
		{"max_dph: 0.6", "max_dph: cheap", `gpu.max_dph is "cheap", but it must be a number`},
		{"gate: [\"go vet ./...\"]", "gate: {a: b}", `gate is a mapping, but it must be a list`},
	} {
		_, err := Parse([]byte(strings.Replace(good, c.from, c.to, 1)))
		var te *TypeError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "unmarshal") {
			t.Errorf("%s: err = %v, want a TypeError saying %q", c.to, err, c.want)
		}
	}
}

func TestNotify(t *testing.T) {
	c, err := Parse([]byte(good + "notify: {webhook_env: SLACK_WEBHOOK_URL, events: [start, done, failed]}\n"))
	if err != nil || c.Notify.WebhookEnv != "SLACK_WEBHOOK_URL" || len(c.Notify.Events) != 3 {
		t.Fatalf("%v %+v", err, c)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"notify: {webhook_env: SLACK, events: [strat]}", `"strat" is not an event: did you mean start?`},
		{"notify: {events: [done]}", "notify.events needs notify.webhook_env"},
		{"notify: {webhook_env: 'https://hooks.slack.com/services/T/B/x'}", "names an environment variable, not the URL itself"},
	} {
		if _, err := Parse([]byte(good + bad.yaml + "\n")); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
