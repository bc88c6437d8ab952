package smoke

import (
	"errors"
	"fmt"
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

// The health route a server defines is proposed on the port it serves,
// from FastAPI, Flask, express or a stdlib handler; a client's request to
// /health is not a route.
func TestInitHealthRouteFromCode(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"fastapi": {"main.py": "from fastapi import FastAPI\napp = FastAPI()\n@app.get(\"/v1/models\")\ndef models(): ...\n@app.get('/health')\ndef health(): ...\n", "Dockerfile": "FROM a\nCOPY main.py .\nEXPOSE 8000\nCMD [\"uvicorn\", \"main:app\"]\n"},
		"flask":   {"app.py": "@app.route(\"/healthz\", methods=[\"GET\"])\ndef h(): ...\n", "Dockerfile": "FROM a\nEXPOSE 8000\nCMD python3 app.py\n"},
		"express": {"server.js": "app.get('/health', (req, res) => res.send('ok'))\n", "Dockerfile": "FROM node\nEXPOSE 8000\nCMD [\"node\", \"server.js\"]\n", "examples/client.js": "axios.get('/ping')\n"},
	} {
		p, err := Init(repo(t, files))
		want := "http://localhost:8000/health"
		if name == "flask" {
			want += "z"
		}
		if err != nil || p.Canary.HealthURL != want {
			t.Errorf("%s: health %q, want %q (%v)", name, p.Canary.HealthURL, want, err)
		}
	}
	// No port, no URL to propose.
	if p, _ := Init(repo(t, map[string]string{"app.py": "@app.get('/health')\n", "Dockerfile": "FROM a\nCMD python3 app.py\n"})); p.Canary.HealthURL != "" {
		t.Fatalf("health %q with no port", p.Canary.HealthURL)
	}
}

// Names read only by code the server never imports are optional, not
// secrets: the server's code path starts at the smoke's entry point.
func TestInitClientScriptNamesAreOptional(t *testing.T) {
	dir := repo(t, map[string]string{
		"Dockerfile":         "FROM a\nCOPY speech.py openedai.py ./\nEXPOSE 8000\nCMD [\"bash\", \"startup.sh\"]\n",
		"startup.sh":         "#!/bin/sh\npython download_voices.py\nexec python speech.py \"$@\"\n",
		"speech.py":          "import os\nfrom openedai import OpenAIStub\nHF = os.environ.get('HF_HOME')\n",
		"openedai.py":        "import os\nKEY = os.environ.get('SERVER_API_KEY')\n",
		"download_voices.py": "import os\nos.getenv('VOICES_DIR')\n",
		"say.py":             "import os\nkey = os.environ['OPENAI_API_KEY']\n",
	})
	p, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Secrets, ",") != "SERVER_API_KEY" || strings.Join(p.ClientOnly, ",") != "OPENAI_API_KEY" || strings.Join(p.Optional, ",") != "HF_HOME,VOICES_DIR" {
		t.Fatalf("secrets %v client-only %v optional %v", p.Secrets, p.ClientOnly, p.Optional)
	}
	// With no entry point to follow, every file counts as the server's.
	p, _ = Init(repo(t, map[string]string{"Dockerfile": "FROM a\nCMD [\"tritonserver\"]\n", "say.py": "import os\nos.environ['OPENAI_API_KEY']\n"}))
	if strings.Join(p.Secrets, ",") != "OPENAI_API_KEY" || len(p.ClientOnly) != 0 {
		t.Fatalf("secrets %v client-only %v", p.Secrets, p.ClientOnly)
	}
}

// COPY globs are expanded against the repository, and kept in uploads.
func TestInitUploadsExpandCopyGlobs(t *testing.T) {
	dir := repo(t, map[string]string{
		"Dockerfile": "FROM a\nCOPY *.py ./\nCOPY --chown=1000 voice_to_speaker.default.yaml ./\nCOPY ../outside ./\nCMD python3 speech.py\n",
		"speech.py":  "", "openedai.py": "", "voice_to_speaker.default.yaml": "", "README.md": "",
	})
	p, _ := Init(dir)
	if got := strings.Join(p.Upload, ","); got != "openedai.py,speech.py,voice_to_speaker.default.yaml" {
		t.Fatalf("upload %s", got)
	}
}

// A repository where no smoke can be found gives a proposal that says so
// and is never a contract: Check refuses it, and the rendered section has
// no `smoke: ""` for validate to reject.
func TestInitWithoutASmokeIsNotAContract(t *testing.T) {
	p, err := Init(repo(t, map[string]string{"compose.yaml": "services:\n  develop:\n    image: python:3.12\n    env_file: .env\n", ".env": "MODEL_PATTERN=*\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(p.Check(), ErrNoSmoke) || strings.Contains(p.YAML(), "smoke: \"\"") || !strings.Contains(p.YAML(), "# smoke: not found") {
		t.Fatalf("check %v\n%s", p.Check(), p.YAML())
	}
	if p, _ := Init(repo(t, map[string]string{"Dockerfile": "FROM a\nCMD [\"srv\"]\n"})); p.Check() != nil {
		t.Fatalf("a Dockerfile CMD is a smoke: %v", p.Check())
	}
}

// The served compose service is one service: the one that builds the
// repository's Dockerfile, reserves the GPU or publishes what the
// Dockerfile exposes; dev tools and observability or database images are
// never picked over it, and other services are never merged in. A
// variant file naming the same service extends it.
func TestPickServedService(t *testing.T) {
	dir := repo(t, map[string]string{
		"Dockerfile":        "FROM a\nEXPOSE 8500\nCMD [\"serve\"]\n",
		"compose.yaml":      "services:\n  db:\n    image: postgres:16\n    ports: [\"5432:5432\"]\n    environment: [POSTGRES_PASSWORD]\n  develop:\n    build: .\n    env_file: .env\n    command: [\"sleep\", \"infinity\"]\n  serving:\n    image: ghcr.io/x/koina:latest\n    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [gpu]\n",
		"compose.gpu.yaml":  "services:\n  serving:\n    ports: [\"8501:8501\"]\n    environment:\n      MODEL_PATTERN: demo\n",
		"compose.otel.yaml": "services:\n  otel-collector:\n    image: otel/opentelemetry-collector-contrib:0.110.0\n    ports: [\"4317:4317\"]\n    environment: {OTEL_LEVEL: debug}\n",
		".env":              "DEV_ONLY=1\n",
	})
	p, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Image != "ghcr.io/x/koina:latest" || p.Canary.Smoke != "serve" || fmt.Sprint(p.Canary.Ports) != "[8500 8501]" || p.Env["MODEL_PATTERN"] != "demo" {
		t.Fatalf("image %q smoke %q ports %v env %v", p.Image, p.Canary.Smoke, p.Canary.Ports, p.Env)
	}
	for _, n := range []string{"POSTGRES_PASSWORD", "OTEL_LEVEL"} {
		if contains(p.Canary.EnvNames, n) {
			t.Errorf("%s from another service is an input: %v", n, p.Canary.EnvNames)
		}
	}
	if contains(p.Sources, "compose.otel.yaml") || !contains(p.Sources, "compose.gpu.yaml") {
		t.Errorf("sources %v", p.Sources)
	}
}

func TestSecretLikeNames(t *testing.T) {
	for name, want := range map[string]bool{"HF_TOKEN": true, "OPENAI_API_KEY": true, "AWS_SECRET_ACCESS_KEY": true, "DB_PASSWORD": true, "GHTOKEN": true,
		"MAX_TOKENS": false, "MODEL_MAX_TOKENS": false, "TOKENIZER_PATH": false, "KEYBOARD": false, "MONKEY_MODE": false} {
		if secretLike(name) != want {
			t.Errorf("secretLike(%s) = %t", name, !want)
		}
	}
}
