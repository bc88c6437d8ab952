package smoke

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// gpuVariant reports whether a file name marks the GPU flavour of a
// Dockerfile or compose file (Dockerfile.gpu, compose.cuda.yaml, ...).
func gpuVariant(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"gpu", "cuda", "nvidia"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// composeFiles lists the compose files in dir, GPU variants first, then
// the plain ones, then other variants (compose.cpu.yaml last).
func composeFiles(dir string) []string {
	var gpu, plain, other []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		l := strings.ToLower(n)
		if e.IsDir() || !(strings.HasPrefix(l, "compose") || strings.HasPrefix(l, "docker-compose")) || !(strings.HasSuffix(l, ".yaml") || strings.HasSuffix(l, ".yml")) {
			continue
		}
		switch {
		case gpuVariant(n):
			gpu = append(gpu, n)
		case l == "compose.yaml" || l == "compose.yml" || l == "docker-compose.yaml" || l == "docker-compose.yml":
			plain = append(plain, n)
		default:
			other = append(other, n)
		}
	}
	return append(append(gpu, plain...), other...)
}

// composeService is the part of a compose service init reads.
type composeService struct {
	name        string
	Image       string `yaml:"image"`
	Build       any    `yaml:"build"` // "dir" or {context, dockerfile, target}
	Ports       []any  `yaml:"ports"`
	Environment any    `yaml:"environment"`
	EnvFile     any    `yaml:"env_file"` // "file", ["a", "b"] or [{path: a}]
	Healthcheck struct {
		Test any `yaml:"test"`
	} `yaml:"healthcheck"`
}

func (s composeService) build() (context, dockerfile, target string) {
	switch b := s.Build.(type) {
	case string:
		return b, "", ""
	case map[string]any:
		str := func(k string) string { v, _ := b[k].(string); return v }
		return str("context"), str("dockerfile"), str("target")
	}
	return "", "", ""
}

func (s composeService) envFiles() []string {
	var out []string
	switch v := s.EnvFile.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, x := range v {
			switch y := x.(type) {
			case string:
				out = append(out, y)
			case map[string]any:
				if p, ok := y["path"].(string); ok {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// readCompose parses one compose file's services, sorted by name.
func readCompose(path string) ([]composeService, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	var out []composeService
	for name, s := range doc.Services {
		s.name = name
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// servedService picks the service that serves: the first with ports,
// else the first with a healthcheck, else the first given an environment
// (env_file or environment:), else the first built here, else the first.
func servedService(svcs []composeService) (composeService, bool) {
	if len(svcs) == 0 {
		return composeService{}, false
	}
	for _, pick := range []func(composeService) bool{
		func(s composeService) bool { return len(s.Ports) > 0 },
		func(s composeService) bool { return s.Healthcheck.Test != nil },
		func(s composeService) bool { return s.EnvFile != nil || s.Environment != nil },
		func(s composeService) bool { return s.Build != nil },
	} {
		for _, s := range svcs {
			if pick(s) {
				return s, true
			}
		}
	}
	return svcs[0], true
}

// containerPort reads the container side of a compose port mapping.
func containerPort(p any) (int, bool) {
	if m, ok := p.(map[string]any); ok {
		p = m["target"]
	}
	s := fmt.Sprint(p)
	parts := strings.Split(strings.Split(s, "/")[0], ":")
	n, err := strconv.Atoi(parts[len(parts)-1])
	return n, err == nil && n > 0 && n < 65536
}

// composeEnv reads environment: as name → literal value ("" when none
// or when it interpolates the caller's shell).
func composeEnv(v any) map[string]string {
	out := map[string]string{}
	put := func(k, val string, has bool) {
		if !isName(k) {
			return
		}
		if !has || strings.Contains(val, "${") || strings.HasPrefix(val, "$") {
			val = ""
		}
		out[k] = val
	}
	switch env := v.(type) {
	case []any:
		for _, e := range env {
			k, val, has := strings.Cut(fmt.Sprint(e), "=")
			put(k, val, has)
		}
	case map[string]any:
		for k, val := range env {
			if val == nil {
				put(k, "", false)
			} else {
				put(k, fmt.Sprint(val), true)
			}
		}
	}
	return out
}

// readEnvFile reads NAME=value lines of a .env-style file.
func readEnvFile(path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close() //nolint:errcheck // read-only file
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !isName(k) {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		if strings.Contains(v, "${") {
			v = ""
		}
		out[k] = v
	}
	return out
}

// secretLike reports whether a name looks like it holds a credential.
func secretLike(name string) bool {
	n := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	for _, part := range strings.Split(n, "_") {
		if part == "KEY" {
			return true
		}
	}
	return false
}

// ciWorkflow is the part of a GitHub Actions workflow init reads.
type ciWorkflow struct {
	Env  map[string]any `yaml:"env"`
	Jobs map[string]struct {
		Env   map[string]any `yaml:"env"`
		Steps []struct {
			Name string         `yaml:"name"`
			Run  string         `yaml:"run"`
			Env  map[string]any `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

var (
	secretRef = regexp.MustCompile(`\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	testRun   = regexp.MustCompile(`(?m)^\s*((?:poetry run |uv run |python3? -m )?pytest\b.*|task test\b.*|nox\b.*|make test\b.*|go test\b.*|npm (?:run )?test\b.*|tox\b.*)$`)
)

// ciFindings is what the CI workflow that runs the tests says.
type ciFindings struct {
	file    string
	unit    string
	env     map[string]string
	secrets []string
}

// readCI finds the workflow step that runs the tests, its job's env and
// the secrets that workflow uses. Steps that drive docker compose need
// the server and an engine: they are not a local unit step.
func readCI(dir string) (ciFindings, bool) {
	paths, _ := filepath.Glob(filepath.Join(dir, ".github", "workflows", "*.y*ml"))
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var wf ciWorkflow
		if yaml.Unmarshal(b, &wf) != nil {
			continue
		}
		jobs := make([]string, 0, len(wf.Jobs))
		for j := range wf.Jobs {
			jobs = append(jobs, j)
		}
		sort.Strings(jobs)
		for _, j := range jobs {
			job := wf.Jobs[j]
			for _, st := range job.Steps {
				if strings.Contains(st.Run, "docker") {
					continue
				}
				m := testRun.FindStringSubmatch(st.Run)
				if m == nil {
					continue
				}
				f := ciFindings{file: filepath.ToSlash(mustRel(dir, p)), unit: strings.TrimSpace(m[1]), env: map[string]string{}}
				for _, src := range []map[string]any{wf.Env, job.Env, st.Env} {
					for k, v := range src {
						s := fmt.Sprint(v)
						if sm := secretRef.FindStringSubmatch(s); sm != nil {
							f.secrets = append(f.secrets, k)
							continue
						}
						if strings.Contains(s, "${{") || !isName(k) || ciOnly[k] {
							continue
						}
						f.env[k] = s
					}
				}
				for _, sm := range secretRef.FindAllStringSubmatch(string(b), -1) {
					if sm[1] != "GITHUB_TOKEN" && !contains(f.secrets, sm[1]) {
						f.secrets = append(f.secrets, sm[1])
					}
				}
				sort.Strings(f.secrets)
				return f, true
			}
		}
	}
	return ciFindings{}, false
}

// ciOnly names CI plumbing that is no input of the program under test.
var ciOnly = map[string]bool{"CI": true, "FORCE_COLOR": true, "PYTHONUNBUFFERED": true, "TERM": true, "PIP_NO_CACHE_DIR": true, "UV_SYSTEM_PYTHON": true}

func mustRel(dir, p string) string {
	r, err := filepath.Rel(dir, p)
	if err != nil {
		return p
	}
	return r
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var (
	settingsClass = regexp.MustCompile(`(?m)^class\s+\w+\(\s*(?:\w+\.)?BaseSettings\s*\)\s*:`)
	settingsField = regexp.MustCompile(`(?m)^[ \t]+([a-z_][a-z0-9_]*)\s*:\s*([^=\n]+)`)
	envPrefix     = regexp.MustCompile(`env_prefix\s*=\s*["']([^"']*)["']`)
	getenvCall    = regexp.MustCompile(`os\.(?:getenv|environ\.get|environ\[)\(?\s*["']([A-Za-z_][A-Za-z0-9_]*)["']`)
)

// pyEnv reads, from the Python sources, the names read from the
// environment: pydantic settings fields (SecretStr ones are secrets) and
// os.getenv / os.environ lookups. Settings fields have defaults in the
// code, so only their secrets are reported as needed.
func pyEnv(dir string) (names, secrets []string, sources []string) {
	seen := map[string]bool{}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error { //nolint:errcheck // the callback returns no error: unreadable parts are skipped
		if err != nil {
			return nil
		}
		rel := mustRel(dir, path)
		if d.IsDir() {
			base := d.Name()
			if path != dir && (strings.HasPrefix(base, ".") || base == "node_modules" || base == "venv" || base == "tests" || base == "test" || base == "__pycache__" || strings.Count(rel, string(filepath.Separator)) >= 4) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".py") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) > 1<<20 {
			return nil
		}
		text := string(b)
		found := false
		if loc := settingsClass.FindStringIndex(text); loc != nil {
			prefix := ""
			if m := envPrefix.FindStringSubmatch(text); m != nil {
				prefix = m[1]
			}
			body := text[loc[1]:]
			if end := regexp.MustCompile(`(?m)^\S`).FindStringIndex(body); end != nil {
				body = body[:end[0]]
			}
			for _, m := range settingsField.FindAllStringSubmatch(body, -1) {
				if m[1] == "model_config" {
					continue
				}
				name := strings.ToUpper(prefix + m[1])
				if strings.Contains(m[2], "SecretStr") || secretLike(name) {
					if !seen[name] {
						seen[name] = true
						secrets = append(secrets, name)
					}
					found = true
				}
			}
		}
		for _, m := range getenvCall.FindAllStringSubmatch(text, -1) {
			if !seen[m[1]] && m[1] != "PATH" && m[1] != "HOME" {
				seen[m[1]] = true
				if secretLike(m[1]) {
					secrets = append(secrets, m[1])
				} else {
					names = append(names, m[1])
				}
			}
			found = true
		}
		if found {
			sources = append(sources, filepath.ToSlash(rel))
		}
		return nil
	})
	return names, secrets, sources
}

// hasTests reports whether dir holds Python tests (test_*.py, *_test.py,
// or conftest.py), the only case a pytest runner is worth proposing.
func hasPythonTests(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error { //nolint:errcheck // the callback returns no error: unreadable parts are skipped
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || strings.Count(mustRel(dir, path), string(filepath.Separator)) >= 4) {
				return filepath.SkipDir
			}
			return nil
		}
		n := d.Name()
		if strings.HasSuffix(n, ".py") && (strings.HasPrefix(n, "test_") || strings.HasSuffix(n, "_test.py")) {
			found = true
		}
		return nil
	})
	return found
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// hasTarget reports whether a Makefile or Taskfile defines target.
func makeTarget(dir, target string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, target+":") {
			return true
		}
	}
	return false
}

func taskTarget(dir, target string) (string, bool) {
	for _, n := range []string{"Taskfile.yml", "Taskfile.yaml", "taskfile.yml", "taskfile.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		var doc struct {
			Tasks map[string]any `yaml:"tasks"`
		}
		if yaml.Unmarshal(b, &doc) == nil {
			if _, ok := doc.Tasks[target]; ok {
				return n, true
			}
		}
	}
	return "", false
}

// noxfile finds noxfile.py at the root or one folder down.
func noxfile(dir string) (string, bool) {
	if exists(dir, "noxfile.py") {
		return ".", true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*", "noxfile.py"))
	m2, _ := filepath.Glob(filepath.Join(dir, "*", "*", "noxfile.py"))
	m = append(m, m2...)
	sort.Strings(m)
	if len(m) > 0 {
		return filepath.ToSlash(mustRel(dir, filepath.Dir(m[0]))), true
	}
	return "", false
}

// ciImage is the first image a workflow names (a build-push step's tags:,
// a metadata step's images:, a job's image:), from a registry host, with
// no ${{ }} in it.
var ciImageRE = regexp.MustCompile(`(?m)^\s*-?\s*(?:tags|images|image):\s*["']?([a-z0-9.-]+\.[a-z]{2,}(?::\d+)?/[A-Za-z0-9._/-]+(?::[A-Za-z0-9._-]+)?)`)

func ciImage(dir string) (image, file string) {
	paths, _ := filepath.Glob(filepath.Join(dir, ".github", "workflows", "*.y*ml"))
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if m := ciImageRE.FindStringSubmatch(string(b)); m != nil {
			return m[1], filepath.ToSlash(mustRel(dir, p))
		}
	}
	return "", ""
}
