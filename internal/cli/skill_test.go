package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// The agent skill (skills/vastrun/SKILL.md) teaches commands: each one in
// its sh blocks is run here, in order, against one simulator (as `vastrun
// sim serve` serves it, so that plan, apply, status and down see the same
// marketplace), in a repository holding the examples as the configs the
// skill names. A command the skill shows the operator running at a
// terminal (apply or down without --yes) gets the operator's "y". Every
// command must succeed; what it ran is logged (go test -v).

const skillPath = "../../skills/vastrun/SKILL.md"

// skillFixtures are the configs the skill's commands name, from the
// examples.
var skillFixtures = map[string]string{
	"vastrun.yaml": "examples/ci.yaml",
	"canary.yaml":  "examples/canary/vastrun.yaml",
	"train.yaml":   "examples/train/train.yaml",
}

var skillName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// skillDoc splits SKILL.md into its frontmatter and its commands.
func skillDoc(t *testing.T) (front map[string]string, commands []string) {
	t.Helper()
	b, err := os.ReadFile(skillPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.HasPrefix(text, "---\n") {
		t.Fatal("SKILL.md does not start with YAML frontmatter")
	}
	head, body, ok := strings.Cut(text[4:], "\n---\n")
	if !ok {
		t.Fatal("SKILL.md's frontmatter is not closed")
	}
	if err := yaml.Unmarshal([]byte(head), &front); err != nil {
		t.Fatalf("frontmatter: %v", err)
	}
	in := false
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```"):
			in = !in && strings.TrimPrefix(line, "```") == "sh"
		case in && strings.HasPrefix(line, "vastrun "):
			commands = append(commands, line)
		}
	}
	return front, commands
}

// The frontmatter follows the Agent Skills format (agentskills.io): a
// name matching the directory, a description of what and when.
func TestSkillFrontmatter(t *testing.T) {
	front, commands := skillDoc(t)
	if n := front["name"]; n != filepath.Base(filepath.Dir(skillPath)) || len(n) > 64 || !skillName.MatchString(n) {
		t.Errorf("name %q: lowercase letters, digits and single hyphens, at most 64, the directory's name", n)
	}
	if d := front["description"]; d == "" || len(d) > 1024 || strings.ContainsAny(d, "<>") {
		t.Errorf("description: %d characters; want 1 to 1024, no angle brackets", len(d))
	}
	if c := front["compatibility"]; len(c) > 500 {
		t.Errorf("compatibility: %d characters, at most 500", len(c))
	}
	if len(commands) < 10 {
		t.Fatalf("found %d commands in the skill", len(commands))
	}
	// The discipline, as the skill writes it: --yes only with the
	// approved hash (the CI path), and every apply after a plan.
	planned := false
	for _, c := range commands {
		planned = planned || strings.HasPrefix(c, "vastrun plan ")
		if strings.Contains(c, "--yes") && !strings.Contains(c, "--sha256") {
			t.Errorf("the skill shows %q: --yes without the approved plan's hash", c)
		}
		if strings.HasPrefix(c, "vastrun apply ") && !planned {
			t.Errorf("the skill applies before it plans: %q", c)
		}
	}
}

// words splits a command line as sh would, for the skill's simple lines:
// single and double quotes, and $NAME / ${NAME} expanded from env.
func words(line string, env func(string) string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'' && c != '\'':
			cur.WriteByte(c)
		case quote == '\'':
			quote = 0
		case c == '"' && quote == '"':
			quote = 0
		case (c == '"' || c == '\'') && quote == 0:
			quote, inWord = c, true
		case c == '$':
			j := i + 1
			braced := j < len(line) && line[j] == '{'
			if braced {
				j++
			}
			k := j
			for k < len(line) && (line[k] == '_' || line[k] >= 'A' && line[k] <= 'Z' || line[k] >= 'a' && line[k] <= 'z' || line[k] >= '0' && line[k] <= '9') {
				k++
			}
			cur.WriteString(env(line[j:k]))
			if braced {
				k++
			}
			i, inWord = k-1, true
		case (c == ' ' || c == '\t') && quote == 0:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && quote == 0 && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", line)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

func TestSkillWords(t *testing.T) {
	env := func(k string) string { return map[string]string{"H": "ab12"}[k] }
	for line, want := range map[string]string{
		`vastrun apply plan.json --yes --sha256 "$H"`: "vastrun|apply|plan.json|--yes|--sha256|ab12",
		`vastrun offers 'a b' x${H}y # note`:          "vastrun|offers|a b|xab12y",
	} {
		got, err := words(line, env)
		if err != nil || strings.Join(got, "|") != want {
			t.Errorf("%s: %q %v, want %s", line, got, err, want)
		}
	}
}

func TestSkillCommandsRunUnderTheSimulator(t *testing.T) {
	_, commands := skillDoc(t)
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(sim.Config{APIKey: mcpKey, Clock: clock.NewScaled(time.Now(), 60)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.CopyFS("examples", os.DirFS(examples)); err != nil {
		t.Fatal(err)
	}
	for name, from := range skillFixtures {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"VAST_URL": srv.URL, "VAST_API_KEY": mcpKey, "HOME": dir, "PATH": os.Getenv("PATH"),
		"VASTRUN_CONTAINER_ENGINE": "none", "PWD": dir}
	var transcript bytes.Buffer
	applied := 0
	for _, line := range commands {
		args, err := words(line, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		io := NewIOStreams(strings.NewReader(""), &stdout, &stderr)
		// The skill shows the operator running apply and down at a
		// terminal, without --yes: the operator answers yes.
		operator := (args[1] == "apply" || args[1] == "down") && !strings.Contains(line, "--yes")
		if operator {
			io.In, io.InTTY = strings.NewReader("y\n"), true
		}
		f := &Factory{IO: io, Getenv: func(k string) string { return env[k] }, HomeDir: dir}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		code := Run(ctx, f, args[1:])
		cancel()
		who := "agent"
		if operator {
			who = "operator"
		}
		fmt.Fprintf(&transcript, "$ %s    # %s, exit %d\n", line, who, code)
		for _, l := range tail(stderr.String(), 3) {
			fmt.Fprintf(&transcript, "    %s\n", l)
		}
		if code != 0 {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", line, code, stdout.String(), stderr.String())
		}
		switch args[1] {
		case "plan":
			for _, l := range strings.Split(stdout.String(), "\n") {
				if h, ok := strings.CutPrefix(l, "sha256="); ok {
					env["PLAN_SHA256"] = h
				}
			}
			if len(env["PLAN_SHA256"]) != 64 {
				t.Fatalf("%s printed no sha256: %s", line, stdout.String())
			}
		case "apply":
			applied++
			if !strings.Contains(stdout.String(), "passed") && !strings.Contains(stdout.String(), "match") {
				t.Fatalf("%s: the run did not pass:\n%s", line, stdout.String())
			}
		}
	}
	st := s.Snapshot()
	if len(st.Live) != 0 || len(st.Gone) < applied || applied < 5 {
		t.Fatalf("after the skill: %d live, %d rented, %d applies", len(st.Live), len(st.Gone), applied)
	}
	// Every receipt names the plan it applied.
	receipts, _ := filepath.Glob("vastrun-evidence/*/receipt.json")
	named := 0
	for _, r := range receipts {
		var rec struct {
			PlanSHA256 string `json:"plan_sha256"`
		}
		b, _ := os.ReadFile(r)
		if json.Unmarshal(b, &rec) == nil && len(rec.PlanSHA256) == 64 {
			named++
		}
	}
	if named != applied {
		t.Fatalf("%d of %d receipts name their plan", named, applied)
	}
	t.Logf("the skill's commands under the simulator:\n%s", transcript.String())
	if p := os.Getenv("VASTRUN_SKILL_TRANSCRIPT"); p != "" {
		os.WriteFile(p, transcript.Bytes(), 0o644)
	}
}

func tail(s string, n int) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
