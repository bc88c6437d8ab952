// Package cienv knows the CI systems vastrun runs in: which one it is, whether
// the triggering event is trusted, and how to leave state, outputs,
// annotations and summaries where that system keeps them.
//
// State that must survive a cancelled job (the instance id above all) goes
// to durable places at once: $GITHUB_STATE (read by the action's post step),
// $GITHUB_OUTPUT and a dotenv file for GitLab — never only to job outputs.
package cienv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/vastrun/vastrun/internal/redact"
)

// Env is the detected CI environment.
type Env struct {
	System    string // "github", "gitlab" or "" (none)
	RunID     string
	RunURL    string
	Repo      string
	Commit    string
	Ref       string
	EventName string
	// Files the system reads back.
	OutputFile  string // $GITHUB_OUTPUT
	StateFile   string // $GITHUB_STATE
	SummaryFile string // $GITHUB_STEP_SUMMARY
	// DotenvFile is where GitLab jobs keep KEY=value state for
	// artifacts:reports:dotenv and after_script (VASTRUN_DOTENV, default
	// vastrun.env in GitLab).
	DotenvFile string
	// Redactor masks what is written to those files (they are read by
	// people and other jobs); nil masks token shapes only.
	Redactor *redact.Redactor

	getenv func(string) string
}

// Detect reads the environment.
func Detect(getenv func(string) string) Env {
	e := Env{getenv: getenv}
	switch {
	case getenv("GITHUB_ACTIONS") == "true":
		e.System = "github"
		e.RunID = getenv("GITHUB_RUN_ID")
		if a := getenv("GITHUB_RUN_ATTEMPT"); a != "" && e.RunID != "" {
			e.RunID += "-" + a
		}
		if s, r := getenv("GITHUB_SERVER_URL"), getenv("GITHUB_REPOSITORY"); s != "" && r != "" {
			e.RunURL = fmt.Sprintf("%s/%s/actions/runs/%s", s, r, getenv("GITHUB_RUN_ID"))
		}
		e.Repo, e.Commit, e.Ref, e.EventName = getenv("GITHUB_REPOSITORY"), getenv("GITHUB_SHA"), getenv("GITHUB_REF"), getenv("GITHUB_EVENT_NAME")
		e.OutputFile, e.StateFile, e.SummaryFile = getenv("GITHUB_OUTPUT"), getenv("GITHUB_STATE"), getenv("GITHUB_STEP_SUMMARY")
	case getenv("GITLAB_CI") == "true":
		e.System = "gitlab"
		e.RunID = getenv("CI_PIPELINE_ID") + "-" + getenv("CI_JOB_ID")
		e.RunURL = getenv("CI_JOB_URL")
		e.Repo, e.Commit, e.Ref, e.EventName = getenv("CI_PROJECT_PATH"), getenv("CI_COMMIT_SHA"), getenv("CI_COMMIT_REF_NAME"), getenv("CI_PIPELINE_SOURCE")
		e.DotenvFile = getenv("VASTRUN_DOTENV")
		if e.DotenvFile == "" {
			e.DotenvFile = "vastrun.env"
		}
	}
	if e.DotenvFile == "" {
		e.DotenvFile = getenv("VASTRUN_DOTENV")
	}
	return e
}

// Trust is the verdict on the triggering event.
type Trust struct {
	Trusted bool
	Reason  string
}

// CheckTrust decides whether this event may spend money and see secrets.
// It must be called before any key is read. readFile reads the GitHub event
// payload; allowPRTarget lets pull_request_target through on purpose.
func (e Env) CheckTrust(readFile func(string) ([]byte, error), allowPRTarget bool) Trust {
	switch e.System {
	case "github":
		switch e.EventName {
		case "pull_request_target":
			if !allowPRTarget {
				return Trust{false, "pull_request_target runs with the base repository's secrets on code from the PR; allow it explicitly with --allow-pull-request-target"}
			}
		case "pull_request", "pull_request_review", "pull_request_review_comment":
			fork, err := e.githubPRFromFork(readFile)
			if err != nil {
				return Trust{false, "cannot tell whether the pull request comes from a fork (" + err.Error() + "); refusing to rent"}
			}
			if fork {
				return Trust{false, "pull request from a fork: untrusted code must not run with the Vast key"}
			}
		}
	case "gitlab":
		src, dst := e.getenv("CI_MERGE_REQUEST_SOURCE_PROJECT_ID"), e.getenv("CI_MERGE_REQUEST_PROJECT_ID")
		if src != "" && dst != "" && src != dst {
			return Trust{false, "merge request from a fork: untrusted code must not run with the Vast key"}
		}
	}
	return Trust{true, ""}
}

func (e Env) githubPRFromFork(readFile func(string) ([]byte, error)) (bool, error) {
	path := e.getenv("GITHUB_EVENT_PATH")
	if path == "" {
		return false, errors.New("GITHUB_EVENT_PATH is not set")
	}
	b, err := readFile(path)
	if err != nil {
		return false, err
	}
	var ev struct {
		PullRequest *struct {
			Head struct {
				Repo *struct {
					Fork     bool   `json:"fork"`
					FullName string `json:"full_name"`
				} `json:"repo"`
			} `json:"head"`
			Base struct {
				Repo struct {
					FullName string `json:"full_name"`
				} `json:"repo"`
			} `json:"base"`
		} `json:"pull_request"`
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		return false, fmt.Errorf("event payload: %w", err)
	}
	if ev.PullRequest == nil {
		return false, errors.New("event payload has no pull_request")
	}
	head := ev.PullRequest.Head.Repo
	if head == nil { // the head repository was deleted: treat as foreign
		return true, nil
	}
	return head.Fork || head.FullName != ev.PullRequest.Base.Repo.FullName, nil
}

// Persist records key/values where this CI system keeps them durably:
// GitHub outputs and state files (appended, as GitHub expects) and a dotenv
// file (rewritten atomically). Values must be single-line.
func (e Env) Persist(kv map[string]string) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.ContainsAny(kv[k], "\r\n") {
			return fmt.Errorf("persist %s: value has a newline", k)
		}
	}
	var errs []error
	for _, f := range []string{e.OutputFile, e.StateFile} {
		if f == "" {
			continue
		}
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s\n", k, kv[k])
		}
		if err := e.appendSync(f, b.String()); err != nil {
			errs = append(errs, err)
		}
	}
	if e.DotenvFile != "" {
		if err := e.mergeDotenv(e.DotenvFile, kv); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// appendSync appends text, masked, and syncs it.
func (e Env) appendSync(path, text string) error {
	f, err := redact.NewSink(e.Redactor).Append(path, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write([]byte(text)); err != nil {
		f.Close() //nolint:errcheck // the write error is the one to report
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// mergeDotenv updates KEY=value lines, writing a temporary file and
// renaming it so a cancelled job never leaves a half-written file.
func (e Env) mergeDotenv(path string, kv map[string]string) error {
	cur := map[string]string{}
	var order []string
	if b, err := os.ReadFile(path); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && k != "" {
				if _, seen := cur[k]; !seen {
					order = append(order, k)
				}
				cur[k] = v
			}
		}
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, seen := cur[k]; !seen {
			order = append(order, k)
		}
		cur[k] = kv[k]
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "%s=%s\n", k, cur[k])
	}
	if err := redact.NewSink(e.Redactor).WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Annotate prints an error annotation the CI system shows prominently.
func (e Env) Annotate(w io.Writer, level, msg string) {
	msg = strings.ReplaceAll(msg, "\n", " ")
	switch e.System {
	case "github":
		fmt.Fprintf(w, "::%s title=vastrun::%s\n", level, escapeGH(msg)) //nolint:errcheck // w is the CI log: a write it refuses cannot be reported anywhere, and nothing else would reach that log either
	default:
		fmt.Fprintf(w, "%s: vastrun: %s\n", strings.ToUpper(level), msg) //nolint:errcheck // w is the CI log: a write it refuses cannot be reported anywhere, and nothing else would reach that log either
	}
}

// Mask asks the CI system to hide value in its logs.
func (e Env) Mask(w io.Writer, value string) {
	if e.System == "github" && value != "" {
		fmt.Fprintf(w, "::add-mask::%s\n", value) //nolint:errcheck // w is the CI log: a write it refuses cannot be reported anywhere, and nothing else would reach that log either
	}
}

func escapeGH(s string) string {
	r := strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	return r.Replace(s)
}

// AppendSummary adds Markdown to the job's step summary, when there is one.
func (e Env) AppendSummary(markdown string) error {
	if e.SummaryFile == "" {
		return nil
	}
	return e.appendSync(e.SummaryFile, markdown+"\n")
}
