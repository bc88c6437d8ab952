package cienv

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDetectGitHubAndGitLab(t *testing.T) {
	gh := Detect(envOf(map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "2",
		"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app", "GITHUB_SHA": "abc", "GITHUB_EVENT_NAME": "push"}))
	if gh.System != "github" || gh.RunID != "77-2" || gh.RunURL != "https://github.com/acme/app/actions/runs/77" || gh.Commit != "abc" {
		t.Fatalf("%+v", gh)
	}
	gl := Detect(envOf(map[string]string{"GITLAB_CI": "true", "CI_PIPELINE_ID": "5", "CI_JOB_ID": "9", "CI_COMMIT_SHA": "def"}))
	if gl.System != "gitlab" || gl.RunID != "5-9" || gl.DotenvFile != "vastrun.env" || gl.Commit != "def" {
		t.Fatalf("%+v", gl)
	}
	if none := Detect(envOf(nil)); none.System != "" {
		t.Fatalf("%+v", none)
	}
}

func TestTrust(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	fork := write("fork.json", `{"pull_request":{"head":{"repo":{"fork":true,"full_name":"eve/app"}},"base":{"repo":{"full_name":"acme/app"}}}}`)
	same := write("same.json", `{"pull_request":{"head":{"repo":{"fork":false,"full_name":"acme/app"}},"base":{"repo":{"full_name":"acme/app"}}}}`)
	renamed := write("renamed.json", `{"pull_request":{"head":{"repo":{"fork":false,"full_name":"eve/app"}},"base":{"repo":{"full_name":"acme/app"}}}}`)
	deleted := write("deleted.json", `{"pull_request":{"head":{"repo":null},"base":{"repo":{"full_name":"acme/app"}}}}`)
	cases := []struct {
		name    string
		env     map[string]string
		allow   bool
		trusted bool
	}{
		{"push", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push"}, false, true},
		{"pr same repo", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": same}, false, true},
		{"pr fork", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": fork}, false, false},
		{"pr other repo not flagged fork", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": renamed}, false, false},
		{"pr deleted head repo", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": deleted}, false, false},
		{"pr unreadable payload", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": filepath.Join(dir, "nope")}, false, false},
		{"pr target", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request_target"}, false, false},
		{"pr target allowed", map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request_target"}, true, true},
		{"gitlab fork MR", map[string]string{"GITLAB_CI": "true", "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "2", "CI_MERGE_REQUEST_PROJECT_ID": "1"}, false, false},
		{"gitlab same-project MR", map[string]string{"GITLAB_CI": "true", "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "1", "CI_MERGE_REQUEST_PROJECT_ID": "1"}, false, true},
		{"local", map[string]string{}, false, true},
	}
	for _, c := range cases {
		tr := Detect(envOf(c.env)).CheckTrust(os.ReadFile, c.allow)
		if tr.Trusted != c.trusted || (!tr.Trusted && tr.Reason == "") {
			t.Errorf("%s: %+v", c.name, tr)
		}
	}
}

func TestPersistWritesEveryDurablePlace(t *testing.T) {
	dir := t.TempDir()
	e := Env{System: "github", OutputFile: filepath.Join(dir, "out"), StateFile: filepath.Join(dir, "state"), DotenvFile: filepath.Join(dir, "v.env")}
	if err := e.Persist(map[string]string{"instance_id": "42", "label": "L"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Persist(map[string]string{"instance_id": "43"}); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(e.OutputFile)
	st, _ := os.ReadFile(e.StateFile)
	env, _ := os.ReadFile(e.DotenvFile)
	if string(out) != "instance_id=42\nlabel=L\ninstance_id=43\n" || string(st) != string(out) {
		t.Fatalf("outputs %q state %q", out, st)
	}
	if string(env) != "instance_id=43\nlabel=L\n" {
		t.Fatalf("dotenv %q", env)
	}
	if err := e.Persist(map[string]string{"x": "a\nb"}); err == nil {
		t.Fatal("multi-line value accepted")
	}
	bad := Env{OutputFile: filepath.Join(dir, "missing", "out")}
	if err := bad.Persist(map[string]string{"a": "b"}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unwritable output file must be reported: %v", err)
	}
}

func TestAnnotateAndMask(t *testing.T) {
	var b bytes.Buffer
	Env{System: "github"}.Annotate(&b, "error", "instance 42 not confirmed\n100%")
	Env{System: "github"}.Mask(&b, "sekrit")
	Env{System: "gitlab"}.Annotate(&b, "error", "instance 42")
	want := "::error title=vastrun::instance 42 not confirmed 100%25\n::add-mask::sekrit\nERROR: vastrun: instance 42\n"
	if b.String() != want {
		t.Fatalf("%q", b.String())
	}
}
