package smoke

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

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

// secretLike reports whether a name looks like it holds a credential: a
// word of it (split at _ and -) is or ends in TOKEN, SECRET, PASSWORD,
// PASSWD, APIKEY or CREDENTIAL(S), or is KEY. MAX_TOKENS and TOKENIZER are
// settings, not credentials.
func secretLike(name string) bool {
	for _, part := range strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool { return r == '_' || r == '-' }) {
		if part == "KEY" {
			return true
		}
		for _, w := range []string{"TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "CREDENTIALS"} {
			if strings.HasSuffix(part, w) {
				return true
			}
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
	secretRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`) })
	testRun   = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\s*((?:poetry run |uv run |python3? -m )?pytest\b.*|task test\b.*|nox\b.*|make test\b.*|go test\b.*|npm (?:run )?test\b.*|tox\b.*)$`)
	})
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
		if f, ok := ciTestStep(wf); ok {
			f.file = filepath.ToSlash(mustRel(dir, p))
			for _, sm := range secretRef().FindAllStringSubmatch(string(b), -1) {
				if sm[1] != "GITHUB_TOKEN" && !contains(f.secrets, sm[1]) {
					f.secrets = append(f.secrets, sm[1])
				}
			}
			sort.Strings(f.secrets)
			return f, true
		}
	}
	return ciFindings{}, false
}

// ciTestStep is the first step (jobs by name) that runs the tests, with
// the env the workflow, its job and the step pass.
func ciTestStep(wf ciWorkflow) (ciFindings, bool) {
	jobs := make([]string, 0, len(wf.Jobs))
	for j := range wf.Jobs {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	for _, j := range jobs {
		job := wf.Jobs[j]
		for _, st := range job.Steps {
			m := testRun().FindStringSubmatch(st.Run)
			if m == nil || strings.Contains(st.Run, "docker") {
				continue
			}
			f := ciFindings{unit: strings.TrimSpace(m[1]), env: map[string]string{}}
			for _, src := range []map[string]any{wf.Env, job.Env, st.Env} {
				f.addEnv(src)
			}
			return f, true
		}
	}
	return ciFindings{}, false
}

// addEnv reads one env: block: a secret reference names a secret, a
// literal is an input, an expression or CI plumbing is neither.
func (f *ciFindings) addEnv(src map[string]any) {
	for k, v := range src {
		s := fmt.Sprint(v)
		switch {
		case secretRef().MatchString(s):
			f.secrets = append(f.secrets, k)
		case strings.Contains(s, "${{") || !isName(k) || ciOnly[k]:
		default:
			f.env[k] = s
		}
	}
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
var ciImageRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\s*-?\s*(?:tags|images|image):\s*["']?([a-z0-9.-]+\.[a-z]{2,}(?::\d+)?/[A-Za-z0-9._/-]+(?::[A-Za-z0-9._-]+)?)`)
})

func ciImage(dir string) (image, file string) {
	paths, _ := filepath.Glob(filepath.Join(dir, ".github", "workflows", "*.y*ml"))
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if m := ciImageRE().FindStringSubmatch(string(b)); m != nil {
			return m[1], filepath.ToSlash(mustRel(dir, p))
		}
	}
	return "", ""
}
