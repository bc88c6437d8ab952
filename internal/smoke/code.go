package smoke

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// What init reads from the source code: the names the server reads from
// the environment (and which of them are credentials), the names read only
// by scripts the server never imports (clients, tools: not inputs of the
// smoke), and the health route the server defines.

// codeFindings is what the source code says.
type codeFindings struct {
	names      []string // read by the server, with defaults in the code
	secrets    []string // credentials the server reads
	clientOnly []string // read only by code the server does not import
	health     string   // a health route ("/health"), "" when none
	healthFile string   // the file that defines it
	sources    []string
}

var (
	settingsClass = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?m)^class\s+\w+\(\s*(?:\w+\.)?BaseSettings\s*\)\s*:`)
	})
	settingsField = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^[ \t]+([a-z_][a-z0-9_]*)\s*:\s*([^=\n]+)`) })
	classEnd      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^\S`) })
	envPrefix     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`env_prefix\s*=\s*["']([^"']*)["']`) })
	getenvCall    = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`os\.(?:getenv|environ\.get|environ\[)\(?\s*["']([A-Za-z_][A-Za-z0-9_]*)["']`)
	})
	// A route the server defines: a decorator or router call (FastAPI,
	// Flask, express), a Go handler, or a stdlib handler's path test.
	routeDef = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:\.(?:get|route|api_route|head|all)\(\s*|Handle(?:Func)?\(\s*|path\s*==\s*|path\s+in\s+[(\[{]\s*)["'](/[A-Za-z0-9_./-]*)["']`)
	})
)

// healthRanks orders the routes a health check uses, best first.
var healthRanks = []string{"health", "ready", "live", "ping"}

// fileEnv is what one source file reads from the environment.
type fileEnv struct {
	names, secrets, routes []string
}

// readFileEnv reads pydantic settings fields (SecretStr ones are secrets)
// and os.getenv / os.environ lookups from Python text, and the health
// routes of any server source.
func readFileEnv(text string, python bool) fileEnv {
	var f fileEnv
	if python {
		f.secrets = settingsSecrets(text)
		for _, m := range getenvCall().FindAllStringSubmatch(text, -1) {
			switch name := m[1]; {
			case name == "PATH" || name == "HOME":
			case secretLike(name):
				f.secrets = append(f.secrets, name)
			default:
				f.names = append(f.names, name)
			}
		}
	}
	for _, m := range routeDef().FindAllStringSubmatch(text, -1) {
		if healthRank(m[1]) < len(healthRanks) {
			f.routes = append(f.routes, m[1])
		}
	}
	return f
}

// settingsSecrets are the credentials a pydantic settings class reads.
// Its other fields have defaults in the code: they are not reported.
func settingsSecrets(text string) []string {
	loc := settingsClass().FindStringIndex(text)
	if loc == nil {
		return nil
	}
	prefix := ""
	if m := envPrefix().FindStringSubmatch(text); m != nil {
		prefix = m[1]
	}
	body := text[loc[1]:]
	if end := classEnd().FindStringIndex(body); end != nil {
		body = body[:end[0]]
	}
	var out []string
	for _, m := range settingsField().FindAllStringSubmatch(body, -1) {
		name := strings.ToUpper(prefix + m[1])
		if m[1] != "model_config" && (strings.Contains(m[2], "SecretStr") || secretLike(name)) {
			out = append(out, name)
		}
	}
	return out
}

func healthRank(route string) int {
	last := strings.ToLower(route[strings.LastIndex(route, "/")+1:])
	for i, w := range healthRanks {
		if strings.HasPrefix(last, w) {
			return i
		}
	}
	return len(healthRanks)
}

// sourceExts are the files read for routes; only Python is read for the
// environment.
var sourceExts = map[string]bool{".py": true, ".js": true, ".mjs": true, ".cjs": true, ".ts": true, ".go": true}

// walkSources calls fn with each source file's repository path, outside
// tests, hidden folders, dependencies and deep trees.
func walkSources(dir string, fn func(rel string)) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error { //nolint:errcheck // the callback returns no error: unreadable parts are skipped
		if err != nil {
			return nil
		}
		rel := filepath.ToSlash(mustRel(dir, p))
		if d.IsDir() {
			base := d.Name()
			if p != dir && (strings.HasPrefix(base, ".") || base == "node_modules" || base == "venv" || base == "tests" || base == "test" || base == "__pycache__" || strings.Count(rel, "/") >= 4) {
				return filepath.SkipDir
			}
			return nil
		}
		if sourceExts[path.Ext(rel)] {
			fn(rel)
		}
		return nil
	})
}

// scanCode reads the sources. When the smoke's Python entry point is
// found, the server is the code it imports; everything else (clients,
// tools, notebooks' helpers) only proposes optional names. When it is not
// found, every file counts as the server's.
func scanCode(dir, smoke string) codeFindings {
	r := codeReader{dir: dir, server: pyServerFiles(dir, smoke), seen: map[string]bool{}, client: map[string]bool{}}
	walkSources(dir, r.visit)
	for _, rel := range sortedKeys(r.server) {
		r.visit(rel) // the server's files below the walk's depth
	}
	c := r.found
	for n := range r.client {
		if !contains(c.names, n) && !contains(c.secrets, n) {
			c.clientOnly = append(c.clientOnly, n)
		}
	}
	sort.Strings(c.clientOnly)
	sort.Slice(r.routes, func(i, j int) bool {
		a, b := r.routes[i], r.routes[j]
		if ra, rb := healthRank(a.path), healthRank(b.path); ra != rb {
			return ra < rb
		}
		return a.path < b.path || a.path == b.path && a.file < b.file
	})
	if len(r.routes) > 0 {
		c.health, c.healthFile = r.routes[0].path, r.routes[0].file
	}
	return c
}

// codeReader is scanCode's walk: server is nil when every file counts as
// the server's.
type codeReader struct {
	dir          string
	server, seen map[string]bool
	client       map[string]bool // names read by code the server does not import
	routes       []route
	found        codeFindings
}

type route struct{ path, file string }

func (r *codeReader) visit(rel string) {
	if r.seen[rel] {
		return
	}
	r.seen[rel] = true
	b, err := os.ReadFile(filepath.Join(r.dir, filepath.FromSlash(rel)))
	if err != nil || len(b) > 1<<20 {
		return
	}
	f := readFileEnv(string(b), strings.HasSuffix(rel, ".py"))
	if r.server != nil && !r.server[rel] {
		for _, n := range append(f.names, f.secrets...) {
			r.client[n] = true
		}
		return
	}
	if r.server != nil || !looksClient(rel) {
		for _, p := range f.routes {
			r.routes = append(r.routes, route{p, rel})
		}
	}
	r.found.names = appendNew(r.found.names, f.names...)
	r.found.secrets = appendNew(r.found.secrets, f.secrets...)
	if len(f.names)+len(f.secrets) > 0 {
		r.found.sources = append(r.found.sources, rel)
	}
}

// looksClient reports a path of client or example code, whose routes are
// requests, not the server's.
func looksClient(rel string) bool {
	l := strings.ToLower(rel)
	return strings.Contains(l, "client") || strings.Contains(l, "example") || strings.HasPrefix(l, "scripts/")
}

func appendNew(list []string, add ...string) []string {
	for _, s := range add {
		if !contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var (
	importLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?m)^[ \t]*import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)`)
	})
	fromLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?m)^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)`)
	})
	appRef      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([A-Za-z_][\w.]*):[A-Za-z_]\w*(?:\(\))?$`) })
	scriptEntry = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*["']?([\w.-]+)["']?\s*=\s*["']([\w.]+):[\w.]+["']`)
	})
)

// pyServerFiles is the set of Python files the smoke's server runs: its
// entry points (a script, -m module, an ASGI/WSGI app reference, a
// console script from pyproject.toml, or those a start script names) and
// what they import from the repository. nil when no entry point is found.
func pyServerFiles(dir, smoke string) map[string]bool {
	roots := []string{"", "src"}
	var queue []string
	for _, e := range pyEntries(dir, smoke, 0) {
		queue = append(queue, e)
		roots = append(roots, path.Dir(e))
	}
	if len(queue) == 0 {
		return nil
	}
	files := map[string]bool{}
	for len(queue) > 0 && len(files) < 5000 {
		rel := queue[0]
		queue = queue[1:]
		if files[rel] {
			continue
		}
		files[rel] = true
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil || len(b) > 1<<20 {
			continue
		}
		queue = append(queue, pyImports(dir, rel, string(b), roots)...)
	}
	return files
}

// pyEntries finds the Python files a smoke command starts.
func pyEntries(dir, smoke string, depth int) []string {
	var out []string
	f := strings.Fields(strings.NewReplacer(`"`, " ", "'", " ", ";", " ", "&&", " ", "||", " ").Replace(smoke))
	for i, tok := range f {
		switch {
		case strings.HasSuffix(tok, ".py"):
			out = append(out, repoFile(dir, tok)...)
		case tok == "-m" && i+1 < len(f):
			out = append(out, resolveModule(dir, []string{"", "src"}, f[i+1])...)
		case appRef().MatchString(tok):
			out = append(out, resolveModule(dir, []string{"", "src"}, appRef().FindStringSubmatch(tok)[1])...)
		case strings.HasSuffix(tok, ".sh") && depth == 0:
			if b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(path.Clean(tok)))); err == nil && len(b) < 64<<10 && !strings.HasPrefix(path.Clean(tok), "..") {
				out = append(out, pyEntries(dir, string(b), 1)...)
			}
		case i == 0 || f[i-1] == "exec" || f[i-1] == "run":
			if mod := consoleScript(dir, tok); mod != "" {
				out = append(out, resolveModule(dir, []string{"", "src"}, mod)...)
			}
		}
	}
	return out
}

// repoFile is p when it names a file in the repository.
func repoFile(dir, p string) []string {
	p = path.Clean(strings.TrimPrefix(p, "./"))
	if p == "." || strings.HasPrefix(p, "..") || path.IsAbs(p) {
		return nil
	}
	if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err == nil && !st.IsDir() {
		return []string{p}
	}
	return nil
}

// consoleScript is the module a pyproject.toml script name runs
// ([project.scripts] or [tool.poetry.scripts]).
func consoleScript(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, "pyproject.toml"))
	if err != nil {
		return ""
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") {
			in = t == "[project.scripts]" || t == "[tool.poetry.scripts]"
			continue
		}
		if m := scriptEntry().FindStringSubmatch(line); in && m != nil && m[1] == name {
			return m[2]
		}
	}
	return ""
}

// resolveModule finds a dotted module's file under one of roots, with the
// __init__.py of each package on the way (they run on import).
func resolveModule(dir string, roots []string, mod string) []string {
	parts := strings.Split(mod, ".")
	for _, root := range roots {
		var out []string
		for i := 1; i < len(parts); i++ {
			out = append(out, repoFile(dir, path.Join(root, path.Join(parts[:i]...), "__init__.py"))...)
		}
		base := path.Join(root, path.Join(parts...))
		if f := repoFile(dir, base+".py"); f != nil {
			return append(out, f...)
		}
		if f := repoFile(dir, path.Join(base, "__init__.py")); f != nil {
			return append(out, f...)
		}
	}
	return nil
}

// pyImports lists the repository files a Python file imports.
func pyImports(dir, rel, text string, roots []string) []string {
	var out []string
	for _, m := range importLine().FindAllStringSubmatch(text, -1) {
		for _, item := range strings.Split(m[1], ",") {
			out = append(out, resolveModule(dir, roots, strings.Fields(item)[0])...)
		}
	}
	for _, m := range fromLine().FindAllStringSubmatch(text, -1) {
		dots, mod := len(m[1]), m[2]
		rs := roots
		if dots > 0 {
			base := path.Dir(rel)
			for i := 1; i < dots; i++ {
				base = path.Dir(base)
			}
			rs = []string{base}
		}
		if mod != "" {
			out = append(out, resolveModule(dir, rs, mod)...)
		}
		for _, name := range strings.Split(strings.Trim(m[3], "() \t\r\n\\"), ",") {
			f := strings.Fields(name)
			if len(f) == 0 || !isName(f[0]) {
				continue
			}
			sub := f[0]
			if mod != "" {
				sub = mod + "." + f[0]
			}
			out = append(out, resolveModule(dir, rs, sub)...)
		}
	}
	return out
}
