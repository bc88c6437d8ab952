// Package canary holds the canary contract's parts that do not need a
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
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

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
	Sources       []string
	Notes         []string
}

// notInputs are names the machine or the image provides, never inputs.
var notInputs = map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true, "PWD": true, "USER": true, "SHELL": true, "LANG": true, "TZ": true}

var portFlag = regexp.MustCompile(`--[a-z-]*port[= ](\d{2,5})\b`)

// Init inspects dir. It never panics on any file it reads; a compose file
// that is not YAML is an error naming the file.
func Init(dir string) (Proposal, error) {
	p := Proposal{Canary: config.Canary{ExpectExit: 0}, Env: map[string]string{}}
	source := func(s string) {
		if !contains(p.Sources, s) {
			p.Sources = append(p.Sources, s)
		}
	}
	ports := map[int]bool{}
	inputs := map[string]string{} // name → documented value
	secrets := map[string]bool{}
	addInput := func(k, v string) {
		if notInputs[k] || !isName(k) {
			return
		}
		if secretLike(k) {
			secrets[k] = true
			return
		}
		if u, err := url.Parse(v); err == nil && u.User != nil {
			v = "" // a URL with credentials in it is a value not to copy
		}
		if old, ok := inputs[k]; !ok || old == "" {
			inputs[k] = v
		}
	}

	// Compose: the GPU variant first. Variants usually extend the plain
	// file, so what their serving services say is merged: the first image,
	// Dockerfile and build target found win (the GPU variant's), and ports,
	// environment, env_file and healthcheck add up.
	target, dockerfile := "", ""
	for _, name := range composeFiles(dir) {
		svcs, err := readCompose(filepath.Join(dir, name))
		if err != nil {
			return p, err
		}
		svc, ok := servedService(svcs)
		if !ok {
			continue
		}
		source(name)
		if p.Image == "" {
			for _, x := range append([]composeService{svc}, svcs...) {
				if x.Image != "" && !strings.Contains(x.Image, "${") {
					p.Image = x.Image
					break
				}
			}
		}
		if ctxDir, df, tg := svc.build(); df != "" || tg != "" {
			if dockerfile == "" && df != "" {
				dockerfile = filepath.Join(ctxDir, df)
			}
			if target == "" {
				target = tg
			}
		}
		for _, pt := range svc.Ports {
			if n, ok := containerPort(pt); ok {
				ports[n] = true
			}
		}
		for k, v := range composeEnv(svc.Environment) {
			addInput(k, v)
		}
		for _, f := range svc.envFiles() {
			if env := readEnvFile(filepath.Join(dir, f)); env != nil {
				source(filepath.ToSlash(f))
				for k, v := range env {
					addInput(k, v)
				}
			}
		}
		if u := healthURL(fmt.Sprint(svc.Healthcheck.Test)); u != "" && p.Canary.HealthURL == "" {
			p.Canary.HealthURL = u
		}
	}
	for _, f := range []string{".env", "sample.env", ".env.example", ".env.sample", "example.env"} {
		if env := readEnvFile(filepath.Join(dir, f)); env != nil {
			source(f)
			for k, v := range env {
				addInput(k, v)
			}
		}
	}

	// The Dockerfile of the GPU side, and the stage that is served.
	if dockerfile == "" {
		dockerfile = pickDockerfile(dir)
	}
	imageEnv := map[string]bool{}
	var img image
	if dockerfile != "" {
		if b, err := os.ReadFile(filepath.Join(dir, dockerfile)); err == nil {
			source(filepath.ToSlash(dockerfile))
			img = servedImage(string(b), target)
			for _, n := range img.env {
				imageEnv[n] = true
				if secretLike(n) {
					// A credential baked in as ENV is a placeholder the
					// run must replace: an input, by name only.
					secrets[n] = true
				}
			}
			if smoke := strings.TrimSpace(img.entry + " " + img.cmd); smoke != "" {
				p.Canary.Smoke = smoke
			}
			for _, n := range img.ports {
				ports[n] = true
			}
			if p.Canary.HealthURL == "" {
				p.Canary.HealthURL = healthURL(img.health)
			}
		}
	}
	for _, m := range portFlag.FindAllStringSubmatch(p.Canary.Smoke, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil && n < 65536 {
			ports[n] = true
		}
	}

	// CI: the step that runs the tests, and what that workflow passes.
	ci, haveCI := readCI(dir)
	if haveCI {
		source(ci.file)
		for k, v := range ci.env {
			addInput(k, v)
		}
		for _, s := range ci.secrets {
			secrets[s] = true
		}
	}
	if p.Image == "" {
		if img, f := ciImage(dir); img != "" {
			p.Image = img
			source(f)
		}
	}
	// Settings read from the environment.
	optional, pySecrets, pySources := pyEnv(dir)
	for _, s := range pySecrets {
		secrets[s] = true
	}
	for _, s := range pySources {
		source(s)
	}
	for _, n := range optional {
		if _, ok := inputs[n]; !ok && !imageEnv[n] && !notInputs[n] {
			p.Optional = append(p.Optional, n)
		}
	}
	sort.Strings(p.Optional)

	// Inputs: a name the image sets and the repository gives no value for
	// is the image's default, not an input.
	for k, v := range inputs {
		if v == "" && imageEnv[k] {
			continue
		}
		p.Env[k] = v
	}
	for n := range imageEnv {
		if _, in := p.Env[n]; !in && !secrets[n] {
			p.ImageDefaults = append(p.ImageDefaults, n)
		}
	}
	sort.Strings(p.ImageDefaults)
	for s := range secrets {
		p.Secrets = append(p.Secrets, s)
	}
	sort.Strings(p.Secrets)
	for k := range p.Env {
		p.Canary.EnvNames = append(p.Canary.EnvNames, k)
	}
	p.Canary.EnvNames = append(p.Canary.EnvNames, p.Secrets...)
	sort.Strings(p.Canary.EnvNames)

	p.Canary.Unit = unitCommand(dir, ci, haveCI, source)
	if p.Canary.Smoke == "" && makeTarget(dir, "smoke") {
		p.Canary.Smoke = "make smoke"
		source("Makefile")
	}
	for n := range ports {
		p.Canary.Ports = append(p.Canary.Ports, n)
	}
	sort.Ints(p.Canary.Ports)
	p.Upload = uploads(dir, img.copies, p.Canary.Smoke)
	if p.Canary.IsServer() {
		p.Notes = append(p.Notes, "the smoke is a server: vastrun starts it, waits for the ports and health_url, sends canary.request, then stops it")
	}
	if strings.HasPrefix(p.Canary.Smoke, "/") {
		p.Notes = append(p.Notes, "the smoke runs a path inside the image; locally it runs on this host, where that path may not exist")
	}
	if len(p.Sources) == 0 {
		return p, fmt.Errorf("found no Dockerfile, compose file, CI workflow, Makefile or package manifest in %s", dir)
	}
	return p, nil
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
// copies from the build context, and the repository paths the smoke
// names (a file, or a Python module's package).
func uploads(dir string, copies []string, smoke string) []string {
	set := map[string]bool{}
	add := func(p string) {
		p = filepath.ToSlash(filepath.Clean(strings.TrimPrefix(p, "./")))
		if p == "." || p == "" || strings.HasPrefix(p, "..") || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "*?[$") {
			return
		}
		if exists(dir, p) {
			set[p] = true
		}
	}
	for _, c := range copies {
		add(c)
	}
	for _, f := range strings.Fields(smoke) {
		f = strings.Trim(f, `'"`)
		add(f)
		if mod, _, ok := strings.Cut(f, ":"); ok || strings.Count(f, ".") > 0 {
			top := strings.Split(mod, ".")[0]
			if isName(top) {
				add(top)
				add("src/" + top)
			}
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		covered := false
		for q := range set {
			if strings.HasPrefix(p, q+"/") {
				covered = true
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
