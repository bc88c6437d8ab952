package smoke

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/config"
)

func repo(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, body := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	return dir
}

func TestInitFromDockerfileAndMakefile(t *testing.T) {
	dir := repo(t, map[string]string{
		"Dockerfile": "FROM python:3.12\n# comment\nENV MODEL_DIR=/models \\\n    HF_HOME=/cache\nENV HF_TOKEN placeholder\nEXPOSE 8080/tcp 9090\n" +
			"HEALTHCHECK --interval=5s CMD curl -f http://localhost:8080/health || exit 1\n" +
			`ENTRYPOINT ["python", "-m", "app"]` + "\nCMD [\"--smoke\", \"--out\", \"$VASTRUN_RESULT\"]\n",
		"Makefile": "test:\n\tpytest\n",
	})
	p, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Canary
	if c.Smoke != "python -m app --smoke --out '$VASTRUN_RESULT'" || c.Unit != "make test" || c.HealthURL != "http://localhost:8080/health" {
		t.Fatalf("%+v", c)
	}
	// ENV names are the image's defaults; a credential among them is a secret to pass.
	if strings.Join(c.EnvNames, ",") != "HF_TOKEN" || strings.Join(p.Secrets, ",") != "HF_TOKEN" || strings.Join(p.ImageDefaults, ",") != "HF_HOME,MODEL_DIR" || len(c.Ports) != 2 || c.Ports[0] != 8080 || c.Ports[1] != 9090 {
		t.Fatalf("env %v secrets %v defaults %v ports %v", c.EnvNames, p.Secrets, p.ImageDefaults, c.Ports)
	}
	// The rendered block is valid config that names no values.
	var doc struct {
		Canary config.Canary `yaml:"canary"`
	}
	if err := yaml.Unmarshal([]byte(p.YAML()), &doc); err != nil || doc.Canary.Smoke != c.Smoke {
		t.Fatalf("yaml: %v\n%s", err, p.YAML())
	}
	if strings.Contains(p.YAML(), "placeholder") || strings.Contains(p.YAML(), "/models") {
		t.Fatalf("environment values leaked into the proposal:\n%s", p.YAML())
	}
}

func TestInitFromComposeAndPackage(t *testing.T) {
	dir := repo(t, map[string]string{
		"compose.yaml": "services:\n  api:\n    ports: [\"127.0.0.1:3000:3000\"]\n    environment:\n      - DATABASE_URL=postgres://x\n      - API_SECRET\n    healthcheck:\n      test: [\"CMD\", \"curl\", \"-f\", \"http://localhost:3000/healthz\"]\n",
		"package.json": `{"scripts": {"test": "vitest run"}}`,
	})
	p, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Canary
	if c.Unit != "npm test" || c.HealthURL != "http://localhost:3000/healthz" || len(c.Ports) != 1 || c.Ports[0] != 3000 ||
		strings.Join(c.EnvNames, ",") != "API_SECRET,DATABASE_URL" || strings.Join(p.Secrets, ",") != "API_SECRET" || p.Env["DATABASE_URL"] != "postgres://x" {
		t.Fatalf("%+v", c)
	}
}

func TestInitGoRepoAndEmpty(t *testing.T) {
	p, err := Init(repo(t, map[string]string{"go.mod": "module x\n", "Makefile": "smoke:\n\t./smoke.sh\n"}))
	if err != nil || p.Canary.Unit != "go test ./..." || p.Canary.Smoke != "make smoke" {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := Init(t.TempDir()); err == nil {
		t.Fatal("an empty directory produced a proposal")
	}
}

func TestEnvNamesAndHealthURL(t *testing.T) {
	if got := envNames("A=1 B=\"two words\""); len(got) < 1 || got[0] != "A" {
		t.Fatalf("%v", got)
	}
	if healthURL("CMD-SHELL wget -q -O- https://x/y || exit 1") != "https://x/y" {
		t.Fatal("health URL")
	}
}
