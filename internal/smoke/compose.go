package smoke

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

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
	Command     any    `yaml:"command"`
	Ports       []any  `yaml:"ports"`
	Environment any    `yaml:"environment"`
	EnvFile     any    `yaml:"env_file"` // "file", ["a", "b"] or [{path: a}]
	Runtime     string `yaml:"runtime"`
	Healthcheck struct {
		Test any `yaml:"test"`
	} `yaml:"healthcheck"`
	Deploy struct {
		Resources struct {
			Reservations struct {
				Devices []struct {
					Driver       string   `yaml:"driver"`
					Capabilities []string `yaml:"capabilities"`
				} `yaml:"devices"`
			} `yaml:"reservations"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
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

// dockerfile is the repository path of the Dockerfile the service builds
// ("" when it builds nothing, or from outside the repository).
func (s composeService) dockerfile() string {
	if s.Build == nil {
		return ""
	}
	ctx, df, _ := s.build()
	if df == "" {
		df = "Dockerfile"
	}
	p := path.Clean(path.Join(filepath.ToSlash(ctx), filepath.ToSlash(df)))
	if strings.HasPrefix(p, "../") || p == ".." || path.IsAbs(p) || strings.Contains(p, "${") {
		return ""
	}
	return p
}

// gpu reports whether the service reserves an NVIDIA GPU.
func (s composeService) gpu() bool {
	if s.Runtime == "nvidia" {
		return true
	}
	for _, d := range s.Deploy.Resources.Reservations.Devices {
		if d.Driver == "nvidia" || slices.Contains(d.Capabilities, "gpu") {
			return true
		}
	}
	return false
}

// command is compose's command: as a shell line ("" when unset).
func (s composeService) command() string {
	switch c := s.Command.(type) {
	case string:
		return c
	case []any:
		list := make([]string, len(c))
		for i, x := range c {
			list[i] = fmt.Sprint(x)
		}
		b, _ := json.Marshal(list)
		return shellForm(string(b))
	}
	return ""
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

// served is one compose service as all compose files describe it: a
// variant (compose.cuda.yaml) that names the same service extends it, so
// its parts are read in file order, GPU variants first. Services of other
// names in other files (an observability stack, dev tools) are never
// merged in.
type served struct {
	name  string
	parts []composeService
	files []string
}

// image is the first literal image a part names.
func (s served) image() string {
	for _, p := range s.parts {
		if p.Image != "" && !strings.Contains(p.Image, "${") {
			return p.Image
		}
	}
	return ""
}

// dockerfile and target are the first part's that builds.
func (s served) dockerfile() (file, target string) {
	for _, p := range s.parts {
		if df := p.dockerfile(); df != "" {
			_, _, tg := p.build()
			return df, tg
		}
	}
	return "", ""
}

func (s served) any(f func(composeService) bool) bool { return slices.ContainsFunc(s.parts, f) }

func (s served) ports() []int {
	var out []int
	for _, p := range s.parts {
		for _, pt := range p.Ports {
			if n, ok := containerPort(pt); ok && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

func (s served) command() string {
	for _, p := range s.parts {
		if c := p.command(); c != "" {
			return c
		}
	}
	return ""
}

func (s served) health() string {
	for _, p := range s.parts {
		if p.Healthcheck.Test != nil {
			if u := healthURL(fmt.Sprint(p.Healthcheck.Test)); u != "" {
				return u
			}
		}
	}
	return ""
}

// composeServices reads every compose file and groups services by name.
func composeServices(dir string) ([]served, error) {
	byName := map[string]*served{}
	var names []string
	for _, f := range composeFiles(dir) {
		svcs, err := readCompose(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		for _, svc := range svcs {
			s := byName[svc.name]
			if s == nil {
				s = &served{name: svc.name}
				byName[svc.name] = s
				names = append(names, svc.name)
			}
			s.parts = append(s.parts, svc)
			s.files = append(s.files, f)
		}
	}
	sort.Strings(names)
	out := make([]served, 0, len(names))
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out, nil
}

// pickServed chooses the one service that serves the repository: it
// builds the repository's own Dockerfile (own), reserves a GPU, publishes
// a port (one the Dockerfile exposes counts more), has a healthcheck and
// an environment. Dev tools (a develop or devcontainer service, one that
// only sleeps) and infrastructure images (Grafana, Prometheus, a
// database) are the last resort. Ties go to the name first in order.
func pickServed(svcs []served, own string, exposed []int) (served, bool) {
	best, bestScore := -1, 0
	for i, s := range svcs {
		if n := serviceScore(s, own, exposed); best < 0 || n > bestScore {
			best, bestScore = i, n
		}
	}
	if best < 0 {
		return served{}, false
	}
	return svcs[best], true
}

func serviceScore(s served, own string, exposed []int) int {
	n := 0
	if df, _ := s.dockerfile(); df != "" {
		n += 3
		if df == own {
			n += 3
		}
	}
	if s.any(composeService.gpu) {
		n += 4
	}
	if ports := s.ports(); len(ports) > 0 {
		n += 3
		if slices.ContainsFunc(ports, func(p int) bool { return slices.Contains(exposed, p) }) {
			n += 2
		}
	}
	if s.any(func(p composeService) bool { return p.Healthcheck.Test != nil }) {
		n += 2
	}
	if s.any(func(p composeService) bool { return p.EnvFile != nil || p.Environment != nil }) {
		n++
	}
	if devTool(s) || infraImage(s) {
		n -= 10
	}
	return n
}

// devNames are service names of development tooling, not of the server.
var devNames = map[string]bool{"dev": true, "develop": true, "development": true, "devcontainer": true, "debug": true, "shell": true,
	"tools": true, "toolbox": true, "lint": true, "test": true, "tests": true, "docs": true, "jupyter": true, "notebook": true, "workspace": true}

func devTool(s served) bool {
	n := strings.ToLower(s.name)
	if devNames[n] || strings.HasPrefix(n, "dev-") || strings.HasPrefix(n, "dev_") || strings.HasSuffix(n, "-dev") || strings.HasSuffix(n, "_dev") {
		return true
	}
	c := strings.Join(strings.Fields(s.command()), " ")
	return strings.HasPrefix(c, "sleep infinity") || strings.HasPrefix(c, "tail -f /dev/null") || c == "bash" || c == "sh"
}

// infraNames are images (and service names) of what runs beside a server:
// observability, databases, proxies.
var infraNames = map[string]bool{"grafana": true, "prometheus": true, "loki": true, "promtail": true, "tempo": true, "jaeger": true, "all-in-one": true,
	"otel-collector": true, "opentelemetry-collector": true, "opentelemetry-collector-contrib": true, "otel-lgtm": true, "alertmanager": true,
	"node-exporter": true, "cadvisor": true, "redis": true, "postgres": true, "mysql": true, "mariadb": true, "mongo": true, "memcached": true,
	"nginx": true, "traefik": true, "caddy": true, "minio": true, "rabbitmq": true, "elasticsearch": true, "kibana": true, "pgadmin4": true}

func infraImage(s served) bool {
	if infraNames[strings.ToLower(s.name)] {
		return true
	}
	for _, p := range s.parts {
		img := strings.ToLower(p.Image)
		if i := strings.IndexAny(img, ":@"); i >= 0 && !strings.Contains(img[i:], "/") {
			img = img[:i]
		}
		if infraNames[img[strings.LastIndex(img, "/")+1:]] {
			return true
		}
	}
	return false
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
