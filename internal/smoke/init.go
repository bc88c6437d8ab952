// Package smoke holds the canary contract's parts that do not need a
// rental: Init reads a repository and proposes the contract; RunServer is
// the server smoke contract (start, wait, probe, stop), written once
// against a [Host] so that the local and the GPU side run it alike;
// Compare is the result comparison (objects by key, listed objects as
// multisets, numbers within a tolerance); Validate checks a contract the
// way the run will.
//
// Init proposes names, never the values of secrets: a value is copied only
// from a file the repository documents it in (compose environment:, an
// env_file, CI env:) and only for a name that does not look like a
// credential. The proposal is a starting point the user edits; `vastrun
// canary validate` checks it.
package smoke

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/vastrun/vastrun/internal/config"
)

// Proposal is what Init found, with where each part came from.
type Proposal struct {
	Canary  config.Canary
	Image   string            // from compose or CI, usually a tag: pin it before running
	Env     map[string]string // inputs that are not secrets, with a documented value or ""
	Secrets []string          // inputs that look like credentials: names only
	Upload  []string          // what the smoke needs on the instance
	// ImageDefaults are names the image sets itself (Dockerfile ENV):
	// defaults, not inputs. Optional are names the code reads from the
	// environment but has defaults for.
	ImageDefaults []string
	Optional      []string
	// ClientOnly are names read only by code the server does not import
	// (client scripts, tools): not inputs of the smoke, so neither env:
	// nor secrets:.
	ClientOnly []string
	Sources    []string
	Notes      []string
}

// notInputs are names the machine or the image provides, never inputs.
var notInputs = map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true, "PWD": true, "USER": true, "SHELL": true, "LANG": true, "TZ": true}

var portFlag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`--[a-z-]*port[= ](\d{2,5})\b`) })

// ErrNoSmoke means init found no command that starts the server or runs
// the smoke: a contract without one is one validate rejects, so it is
// never written.
var ErrNoSmoke = errors.New("found no smoke command (no Dockerfile CMD or ENTRYPOINT, compose command or make smoke target)")

// Check reports a proposal that is not a contract yet (ErrNoSmoke).
func (p Proposal) Check() error {
	if strings.TrimSpace(p.Canary.Smoke) == "" {
		return ErrNoSmoke
	}
	return nil
}

// Init inspects dir. It never panics on any file it reads; a compose file
// that is not YAML is an error naming the file.
//
// Each scanner reads one kind of file and returns what it found; Init
// then merges them in a fixed order of precedence: the compose service
// that serves (compose.go), the Dockerfile stage it builds, .env files,
// the CI workflow, and the source code the server runs (code.go).
func Init(dir string) (Proposal, error) {
	own := pickDockerfile(dir)
	var exposed []int
	if own != "" {
		exposed = readImage(dir, own, "").ports
	}
	compose, err := scanCompose(dir, own, exposed)
	if err != nil {
		return Proposal{}, err
	}
	df, target := compose.dockerfile, compose.target
	if df == "" {
		df = own
	}
	docker := scanDockerfile(dir, df, target, compose.command)
	envFiles := scanEnvFiles(dir)
	ci, ciRead, haveCI := scanCI(dir)

	p := Proposal{Canary: config.Canary{ExpectExit: 0}, Env: map[string]string{}}
	all := []findings{compose.findings, envFiles, docker, ci}
	for _, f := range all {
		p.addSources(f.sources...)
	}
	p.Image = firstOf(compose.image, ci.image)
	if compose.image == "" {
		p.addSources(ci.imageFrom)
	}
	p.Canary.Smoke = docker.smoke
	if p.Canary.Smoke == "" && makeTarget(dir, "smoke") {
		p.Canary.Smoke = "make smoke"
		p.addSources("Makefile")
	}
	code := scanCode(dir, p.Canary.Smoke)
	p.addSources(code.sources...)

	ports := append(append([]int{}, compose.ports...), docker.ports...)
	for _, m := range portFlag().FindAllStringSubmatch(p.Canary.Smoke, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil && n < 65536 {
			ports = append(ports, n)
		}
	}
	ports = uniqueInts(ports)
	p.Canary.HealthURL = firstOf(compose.health, docker.health)
	if p.Canary.HealthURL == "" && code.health != "" && len(ports) > 0 {
		// The route the server defines, on the port it is first
		// published or exposed on.
		p.Canary.HealthURL = "http://localhost:" + strconv.Itoa(ports[0]) + code.health
		p.addSources(code.healthFile)
	}
	p.Canary.Ports = append([]int{}, ports...)
	sort.Ints(p.Canary.Ports)

	p.setInputs(all, docker.imageEnv, code)
	p.Canary.Unit = unitCommand(dir, ciRead, haveCI, func(s string) { p.addSources(s) })
	p.Upload = uploads(dir, docker.copies, p.Canary.Smoke)
	p.notes()
	if len(p.Sources) == 0 {
		return p, fmt.Errorf("found no Dockerfile, compose file, CI workflow, Makefile or package manifest in %s", dir)
	}
	return p, nil
}

func (p *Proposal) addSources(list ...string) {
	for _, s := range list {
		if s != "" && !contains(p.Sources, s) {
			p.Sources = append(p.Sources, s)
		}
	}
}

// setInputs sorts the names the scanners found into env: (documented
// inputs, first documented value wins), secrets: (credentials, names
// only), the image's own defaults, the optional names the server reads
// with defaults in its code, and the names only client code reads.
func (p *Proposal) setInputs(all []findings, imageEnv []string, code codeFindings) {
	inputs, secrets := collectInputs(all, code.secrets)
	isImageEnv := map[string]bool{}
	for _, n := range imageEnv {
		isImageEnv[n] = true
	}
	// A name the image sets and the repository gives no value for is the
	// image's default, not an input.
	for k, v := range inputs {
		if v != "" || !isImageEnv[k] {
			p.Env[k] = v
		}
	}
	for n := range isImageEnv {
		if _, in := p.Env[n]; !in && !secrets[n] {
			p.ImageDefaults = append(p.ImageDefaults, n)
		}
	}
	sort.Strings(p.ImageDefaults)
	known := func(n string) bool {
		_, in := inputs[n]
		return in || isImageEnv[n] || notInputs[n] || secrets[n]
	}
	p.Optional = filterNames(code.names, func(n string) bool { return !known(n) })
	p.ClientOnly = filterNames(code.clientOnly, func(n string) bool { return !known(n) && !contains(p.Optional, n) })
	p.Secrets = sortedKeys(secrets)
	for k := range p.Env {
		p.Canary.EnvNames = append(p.Canary.EnvNames, k)
	}
	p.Canary.EnvNames = append(p.Canary.EnvNames, p.Secrets...)
	sort.Strings(p.Canary.EnvNames)
}

// collectInputs merges the scanners' inputs (the first documented value
// wins; a URL with credentials in it is a value not to copy) and secrets
// (a name that looks like a credential is one, whatever its source).
func collectInputs(all []findings, codeSecrets []string) (inputs map[string]string, secrets map[string]bool) {
	inputs, secrets = map[string]string{}, map[string]bool{}
	for _, s := range codeSecrets {
		secrets[s] = true
	}
	for _, f := range all {
		for _, s := range f.secrets {
			secrets[s] = true
		}
		for _, in := range f.inputs {
			switch {
			case notInputs[in.name] || !isName(in.name):
			case secretLike(in.name):
				secrets[in.name] = true
			case inputs[in.name] == "":
				v := in.value
				if u, err := url.Parse(v); err == nil && u.User != nil {
					v = ""
				}
				inputs[in.name] = v
			}
		}
	}
	return inputs, secrets
}

// filterNames is the sorted names keep accepts.
func filterNames(names []string, keep func(string) bool) []string {
	var out []string
	for _, n := range names {
		if keep(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (p *Proposal) notes() {
	if p.Canary.IsServer() {
		p.Notes = append(p.Notes, "the smoke is a server: vastrun starts it, waits for the ports and health_url, sends canary.request, then stops it")
	}
	if strings.HasPrefix(p.Canary.Smoke, "/") {
		p.Notes = append(p.Notes, "the smoke runs a path inside the image; locally it runs on this host (or in the container built from the Dockerfile), where that path may not exist")
	}
	if p.Check() != nil {
		p.Notes = append(p.Notes, "no smoke command was found: set canary.smoke to the command that starts the server or runs the smoke")
	}
}

// findings is what one scanner read.
type findings struct {
	sources  []string
	image    string
	smoke    string
	health   string
	ports    []int
	inputs   []input // in the order found: the first documented value wins
	secrets  []string
	imageEnv []string
	copies   []string
	// imageFrom is the file image came from, when that is not a source
	// otherwise (a release workflow).
	imageFrom string
}

// input is a name the repository documents, with its value or "".
type input struct{ name, value string }

func (f *findings) addEnv(env map[string]string) {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		f.inputs = append(f.inputs, input{k, env[k]})
	}
}

// composeFindings is the served compose service: what it declares, and
// the Dockerfile, build target and command it runs.
type composeFindings struct {
	findings
	dockerfile, target, command string
}

// scanCompose reads the one service that serves (pickServed) from every
// compose file that describes it.
func scanCompose(dir, own string, exposed []int) (composeFindings, error) {
	var c composeFindings
	svcs, err := composeServices(dir)
	if err != nil {
		return c, err
	}
	s, ok := pickServed(svcs, own, exposed)
	if !ok {
		return c, nil
	}
	for _, f := range s.files {
		if !contains(c.sources, f) {
			c.sources = append(c.sources, f)
		}
	}
	c.image, c.health, c.ports, c.command = s.image(), s.health(), s.ports(), s.command()
	c.dockerfile, c.target = s.dockerfile()
	for _, part := range s.parts {
		c.addEnv(composeEnv(part.Environment))
		for _, f := range part.envFiles() {
			if env := readEnvFile(filepath.Join(dir, f)); env != nil {
				c.sources = append(c.sources, filepath.ToSlash(f))
				c.addEnv(env)
			}
		}
	}
	return c, nil
}

// scanEnvFiles reads the .env-style files a repository documents its
// settings in.
func scanEnvFiles(dir string) findings {
	var f findings
	for _, name := range []string{".env", "sample.env", ".env.example", ".env.sample", "example.env"} {
		if env := readEnvFile(filepath.Join(dir, name)); env != nil {
			f.sources = append(f.sources, name)
			f.addEnv(env)
		}
	}
	return f
}

// readImage reads the served stage of a repository Dockerfile.
func readImage(dir, dockerfile, target string) image {
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(dockerfile)))
	if err != nil {
		return image{}
	}
	return servedImage(string(b), target)
}

// scanDockerfile reads the served stage: its command (compose's command:
// replaces CMD, as compose does), ports, health check, the names it sets
// (defaults, not inputs; a credential among them is a placeholder the run
// must replace: a secret) and what it copies from the build context.
func scanDockerfile(dir, dockerfile, target, command string) findings {
	var f findings
	if dockerfile == "" || !exists(dir, dockerfile) {
		return f
	}
	img := readImage(dir, dockerfile, target)
	f.sources = []string{filepath.ToSlash(dockerfile)}
	if command != "" {
		img.cmd = command
	}
	f.smoke = strings.TrimSpace(img.entry + " " + img.cmd)
	f.ports = img.ports
	f.health = healthURL(img.health)
	f.imageEnv = img.env
	for _, n := range img.env {
		if secretLike(n) {
			f.secrets = append(f.secrets, n)
		}
	}
	f.copies = img.copies
	return f
}

// scanCI reads the CI workflow that runs the tests: what it passes and the
// secrets it uses, and the image a workflow publishes.
func scanCI(dir string) (findings, ciFindings, bool) {
	var f findings
	ci, ok := readCI(dir)
	if ok {
		f.sources = append(f.sources, ci.file)
		f.addEnv(ci.env)
		f.secrets = ci.secrets
	}
	f.image, f.imageFrom = ciImage(dir)
	return f, ci, ok
}

func firstOf(list ...string) string {
	for _, s := range list {
		if s != "" {
			return s
		}
	}
	return ""
}

func uniqueInts(list []int) []int {
	var out []int
	for _, n := range list {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// pickDockerfile prefers the GPU variant (Dockerfile.gpu, Dockerfile.cuda,
// gpu.Dockerfile) to the plain Dockerfile.
func pickDockerfile(dir string) string {
	m, _ := filepath.Glob(filepath.Join(dir, "Dockerfile*"))
	m2, _ := filepath.Glob(filepath.Join(dir, "*.Dockerfile"))
	m = append(m, m2...)
	sort.Strings(m)
	plain := ""
	for _, f := range m {
		n := filepath.Base(f)
		if gpuVariant(n) {
			return n
		}
		if n == "Dockerfile" {
			plain = n
		}
	}
	return plain
}

// unitCommand is the repository's own way to run its tests, or "" when
// it has none (a pytest that collects nothing exits 5).
func unitCommand(dir string, ci ciFindings, haveCI bool, source func(string)) string {
	pyTests := hasPythonTests(dir)
	isPytest := func(cmd string) bool { return strings.Contains(cmd, "pytest") }
	if haveCI && (!isPytest(ci.unit) || pyTests) {
		return ci.unit
	}
	if f, ok := taskTarget(dir, "test"); ok {
		source(f)
		return "task test"
	}
	if makeTarget(dir, "test") {
		source("Makefile")
		return "make test"
	}
	if sub, ok := noxfile(dir); ok {
		if sub == "." {
			source("noxfile.py")
			return "nox"
		}
		source(sub + "/noxfile.py")
		return "cd " + sub + " && nox"
	}
	if b, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil && strings.Contains(string(b), `"test"`) {
		source("package.json")
		return "npm test"
	}
	if exists(dir, "go.mod") {
		source("go.mod")
		return "go test ./..."
	}
	if !pyTests {
		return ""
	}
	switch {
	case exists(dir, "poetry.lock"):
		source("poetry.lock")
		return "poetry run pytest"
	case exists(dir, "uv.lock"):
		source("uv.lock")
		return "uv run pytest"
	}
	for _, f := range []string{"pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini"} {
		if exists(dir, f) {
			source(f)
			return "python3 -m pytest -q"
		}
	}
	return ""
}

// uploads is what the smoke needs on the instance: what the served stage
// copies from the build context (a glob such as *.py is expanded against
// the repository), and the repository paths the smoke names (a file, or a
// Python module's package). A path under another listed one is left out.
func uploads(dir string, copies []string, smoke string) []string {
	set := map[string]bool{}
	add := func(p string) {
		if p = repoPath(p); p != "" && exists(dir, p) {
			set[p] = true
		}
	}
	for _, c := range copies {
		for _, p := range expandCopy(dir, c) {
			add(p)
		}
	}
	for _, f := range strings.Fields(smoke) {
		f = strings.Trim(f, `'"`)
		add(f)
		if mod, _, ok := strings.Cut(f, ":"); ok || strings.Contains(f, ".") {
			if top := strings.Split(mod, ".")[0]; isName(top) {
				add(top)
				add("src/" + top)
			}
		}
	}
	var out []string
	for p := range set {
		if !slices.ContainsFunc(sortedKeys(set), func(q string) bool { return strings.HasPrefix(p, q+"/") }) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// repoPath is p as a path inside the repository, "" when it is not one
// (absolute, outside, the whole context, or not a literal path).
func repoPath(p string) string {
	p = filepath.ToSlash(filepath.Clean(strings.TrimPrefix(p, "./")))
	if p == "." || p == "" || strings.HasPrefix(p, "..") || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "*?[$") {
		return ""
	}
	return p
}

// expandCopy is a COPY source as repository paths: itself, or what its
// glob matches.
func expandCopy(dir, c string) []string {
	if !strings.ContainsAny(c, "*?[") || strings.Contains(c, "$") {
		return []string{c}
	}
	c = filepath.ToSlash(filepath.Clean(strings.TrimPrefix(c, "./")))
	if strings.HasPrefix(c, "..") || strings.HasPrefix(c, "/") {
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(c)))
	out := make([]string, 0, len(m))
	for _, f := range m {
		out = append(out, mustRel(dir, f))
	}
	return out
}
