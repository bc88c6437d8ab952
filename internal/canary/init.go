// Package canary reads a repository to propose its canary contract: the
// smoke command, exit code, ports, health URL and the environment the image
// needs (names only, never values), from the Dockerfile, a compose file,
// and Makefile or package test targets. The proposal is a starting point the
// user edits; `vastrun canary validate` checks it.
package canary

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/config"
)

// Proposal is what Init found, with where each part came from.
type Proposal struct {
	Canary  config.Canary
	Sources []string
}

// Init inspects dir.
func Init(dir string) (Proposal, error) {
	p := Proposal{Canary: config.Canary{ExpectExit: 0}}
	envs := map[string]bool{}
	ports := map[int]bool{}
	if df, err := os.ReadFile(filepath.Join(dir, "Dockerfile")); err == nil {
		p.Sources = append(p.Sources, "Dockerfile")
		entry, cmd, health := "", "", ""
		for _, ins := range dockerInstructions(string(df)) {
			switch ins.op {
			case "ENTRYPOINT":
				entry = shellForm(ins.args)
			case "CMD":
				cmd = shellForm(ins.args)
			case "EXPOSE":
				for _, f := range strings.Fields(ins.args) {
					if n, err := strconv.Atoi(strings.Split(f, "/")[0]); err == nil {
						ports[n] = true
					}
				}
			case "ENV":
				for _, name := range envNames(ins.args) {
					envs[name] = true
				}
			case "HEALTHCHECK":
				if i := strings.Index(strings.ToUpper(ins.args), "CMD"); i >= 0 {
					health = strings.TrimSpace(ins.args[i+3:])
				}
			}
		}
		if smoke := strings.TrimSpace(entry + " " + cmd); smoke != "" {
			p.Canary.Smoke = smoke
		}
		if u := healthURL(health); u != "" {
			p.Canary.HealthURL = u
		}
	}
	for _, name := range []string{"compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		p.Sources = append(p.Sources, name)
		var doc struct {
			Services map[string]struct {
				Ports       []any `yaml:"ports"`
				Environment any   `yaml:"environment"`
				Healthcheck struct {
					Test any `yaml:"test"`
				} `yaml:"healthcheck"`
			} `yaml:"services"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
		for _, svc := range doc.Services {
			for _, pt := range svc.Ports {
				s := fmt.Sprint(pt)
				parts := strings.Split(strings.Split(s, "/")[0], ":")
				if n, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
					ports[n] = true
				}
			}
			switch env := svc.Environment.(type) {
			case []any:
				for _, e := range env {
					envs[strings.SplitN(fmt.Sprint(e), "=", 2)[0]] = true
				}
			case map[string]any:
				for k := range env {
					envs[k] = true
				}
			}
			if p.Canary.HealthURL == "" {
				if u := healthURL(fmt.Sprint(svc.Healthcheck.Test)); u != "" {
					p.Canary.HealthURL = u
				}
			}
		}
		break
	}
	p.Canary.Unit = unitCommand(dir, &p)
	if p.Canary.Smoke == "" {
		if t := makeTarget(dir, "smoke"); t != "" {
			p.Canary.Smoke, p.Sources = "make smoke", append(p.Sources, "Makefile")
		}
	}
	for n := range ports {
		p.Canary.Ports = append(p.Canary.Ports, n)
	}
	sort.Ints(p.Canary.Ports)
	for n := range envs {
		p.Canary.EnvNames = append(p.Canary.EnvNames, n)
	}
	sort.Strings(p.Canary.EnvNames)
	if len(p.Sources) == 0 {
		return p, fmt.Errorf("found no Dockerfile, compose file, Makefile or package manifest in %s", dir)
	}
	return p, nil
}

type instruction struct{ op, args string }

// dockerInstructions splits a Dockerfile into instructions, joining
// continuation lines and dropping comments.
func dockerInstructions(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		op, args, _ := strings.Cut(line, " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return out
}

// shellForm turns exec form ["a","b"] into a shell command line.
func shellForm(args string) string {
	var list []string
	if json.Unmarshal([]byte(args), &list) == nil {
		for i, a := range list {
			if strings.ContainsAny(a, " \t'\"$") {
				list[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
			}
		}
		return strings.Join(list, " ")
	}
	return args
}

// envNames reads names from ENV a=1 b=2 or ENV a 1.
func envNames(args string) []string {
	if !strings.Contains(strings.Fields(args)[0], "=") {
		return []string{strings.Fields(args)[0]}
	}
	var out []string
	for _, f := range strings.Fields(args) {
		if k, _, ok := strings.Cut(f, "="); ok {
			out = append(out, k)
		}
	}
	return out
}

// healthURL extracts an http URL from a health check command.
func healthURL(cmd string) string {
	for _, f := range strings.Fields(strings.NewReplacer("[", " ", "]", " ", ",", " ", `"`, " ").Replace(cmd)) {
		if strings.HasPrefix(f, "http://") || strings.HasPrefix(f, "https://") {
			return f
		}
	}
	return ""
}

func makeTarget(dir, target string) string {
	b, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, target+":") {
			return target
		}
	}
	return ""
}

func unitCommand(dir string, p *Proposal) string {
	if makeTarget(dir, "test") != "" {
		p.Sources = append(p.Sources, "Makefile")
		return "make test"
	}
	if b, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil {
		var pkg struct {
			Scripts map[string]string `json:"scripts"`
		}
		if json.Unmarshal(b, &pkg) == nil && pkg.Scripts["test"] != "" {
			p.Sources = append(p.Sources, "package.json")
			return "npm test"
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		p.Sources = append(p.Sources, "go.mod")
		return "go test ./..."
	}
	for _, f := range []string{"pyproject.toml", "pytest.ini", "setup.cfg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			p.Sources = append(p.Sources, f)
			return "python3 -m pytest -q"
		}
	}
	return ""
}

// YAML renders the proposal as a `canary:` block with comments.
func (p Proposal) YAML() string {
	b, _ := yaml.Marshal(map[string]config.Canary{"canary": p.Canary})
	return fmt.Sprintf("# Proposed by `vastrun canary init` from %s. Edit, then run `vastrun canary validate`.\n# The smoke command runs locally (CPU) and on the GPU; it may write a JSON object\n# to $VASTRUN_RESULT; $VASTRUN_DEVICE is cpu or gpu.\n%s", strings.Join(p.Sources, ", "), b)
}
