package smoke

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/config"
)

const fixtures = "../../testdata/canary-repos"

// What a maintainer of each fixture shape would accept from init. Every
// fixture repository is here: init's output for each must be a contract
// validate accepts.
func TestInitFixtures(t *testing.T) {
	type fixture struct {
		repo, image, unit, smoke, health string
		ports                            []int
		env                              map[string]string
		secrets, upload, notInputs       []string
		clientOnly, notSources           []string
	}
	cases := []fixture{
		{
			repo: "poetry-gpu", image: "ghcr.io/example/asr-demo:latest-gpu", unit: "poetry run pytest", smoke: "asr-demo",
			ports: []int{9000}, env: map[string]string{"ASR_MODEL": "base", "ASR_ENGINE": "faster_whisper"},
			secrets: []string{"HF_TOKEN"}, upload: []string{"app", "poetry.lock", "pyproject.toml"},
			notInputs: []string{"PATH", "POETRY_VENV", "PYTHONDONTWRITEBYTECODE"},
		},
		{
			repo: "uv-compose-settings", image: "ghcr.io/example/speechsrv:latest-cuda",
			unit: `uv run pytest -m "not requires_openai" tests/`, smoke: "uvicorn --factory speechsrv.main:create_app",
			health: "http://localhost:8000/health", ports: []int{8000},
			env:     map[string]string{"LOG_LEVEL": "debug", "PRELOAD_MODELS": ""},
			secrets: []string{"API_KEY", "CHAT_COMPLETION_API_KEY", "HF_TOKEN"}, upload: []string{"pyproject.toml", "src", "uv.lock"},
			notInputs: []string{"HOME", "UVICORN_HOST", "UVICORN_PORT", "UV_LINK_MODE", "UV_PYTHON_CACHE_DIR", "FORCE_COLOR"},
		},
		{
			repo: "triton-multistage", unit: "cd clients/python && nox",
			smoke:  "tritonserver --model-repository=/models --grpc-port=8500 --http-port=8501 --metrics-port=8502",
			health: "http://localhost:8501/v2/health/ready", ports: []int{8500, 8501, 8502},
			env: map[string]string{"MODEL_PATTERN": "demo", "GPU_DEVICE": "0"}, upload: []string{"models"},
			notInputs: []string{"MODEL_REPO"},
		},
		{
			repo: "server-only", smoke: "python3 serve.py --host 0.0.0.0 --port 8080", ports: []int{8080},
			env: map[string]string{}, upload: []string{"serve.py"},
		},
		{
			// Two compose files (one an observability stack) and two
			// services (dev tools first by name, then serving): the
			// service that builds the Dockerfile and reserves the GPU
			// serves; Grafana's port and settings stay out; COPY *.py is
			// expanded; the health route comes from server.py; the client
			// script's key is optional, not a secret.
			repo: "compose-dev-serving", image: "ghcr.io/example/tinyserve:latest", unit: "make test", smoke: "python3 server.py",
			health: "http://localhost:8000/health", ports: []int{8000},
			env: map[string]string{"LOG_LEVEL": "info", "MODEL_NAME": "tiny"}, upload: []string{"model.py", "prompts", "server.py"},
			notInputs:  []string{"GF_AUTH_ANONYMOUS_ENABLED", "JUPYTER_TOKEN", "OPENAI_API_KEY", "MODEL_MAX_TOKENS", "SERVER_URL"},
			clientOnly: []string{"OPENAI_API_KEY", "SERVER_URL"},
			notSources: []string{"compose.observability.yaml", "Dockerfile.dev", "scripts/client.py"},
		},
	}
	ents, err := os.ReadDir(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() && !slices.ContainsFunc(cases, func(c fixture) bool { return c.repo == e.Name() }) {
			t.Errorf("fixture %s has no expectations here", e.Name())
		}
	}
	for _, tc := range cases {
		t.Run(tc.repo, func(t *testing.T) {
			p, err := Init(filepath.Join(fixtures, tc.repo))
			if err != nil {
				t.Fatal(err)
			}
			c := p.Canary
			if p.Image != tc.image || c.Unit != tc.unit || c.Smoke != tc.smoke || c.HealthURL != tc.health || !reflect.DeepEqual(c.Ports, tc.ports) {
				t.Errorf("image %q unit %q smoke %q health %q ports %v", p.Image, c.Unit, c.Smoke, c.HealthURL, c.Ports)
			}
			if !reflect.DeepEqual(p.Env, tc.env) || strings.Join(p.Secrets, ",") != strings.Join(tc.secrets, ",") || strings.Join(p.Upload, ",") != strings.Join(tc.upload, ",") {
				t.Errorf("env %v secrets %v upload %v", p.Env, p.Secrets, p.Upload)
			}
			for _, n := range tc.notInputs {
				if contains(c.EnvNames, n) {
					t.Errorf("%s is proposed as an input: %v", n, c.EnvNames)
				}
			}
			if strings.Join(p.ClientOnly, ",") != strings.Join(tc.clientOnly, ",") {
				t.Errorf("client-only names %v, want %v", p.ClientOnly, tc.clientOnly)
			}
			for _, f := range tc.notSources {
				if contains(p.Sources, f) {
					t.Errorf("%s was read into the proposal: %v", f, p.Sources)
				}
			}
			// The whole proposal, with a pinned image, is a contract
			// validate accepts once the secrets are exported.
			text := "image: ghcr.io/example/x@sha256:" + strings.Repeat("ab", 32) + "\ngpu:\n  max_dph: 1\nbudget:\n  max_spend: 1\n" + p.Render(map[string]bool{"image": true})
			path := filepath.Join(t.TempDir(), "vastrun.yaml")
			os.WriteFile(path, []byte(text), 0o644)
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatalf("%v\n%s", err, text)
			}
			set := func(name string) string {
				if contains(tc.secrets, name) {
					return "long-enough-secret"
				}
				return ""
			}
			if probs := Validate(cfg, set); len(probs) > 0 {
				t.Fatalf("validate: %v\n%s", probs, text)
			}
			if probs := Validate(cfg, func(string) string { return "" }); len(tc.secrets) > 0 && len(probs) == 0 {
				t.Fatal("validate accepted unset secrets")
			}
			var top map[string]any
			yaml.Unmarshal([]byte(text), &top)
			if len(tc.secrets) > 0 && top["secrets"] == nil {
				t.Fatalf("no secrets: key\n%s", text)
			}
		})
	}
}

func TestInitStagesAndVariants(t *testing.T) {
	// A later stage's HEALTHCHECK and CMD do not overwrite the served one's;
	// a stage built FROM another inherits what it does not redeclare.
	df := "FROM base AS serve\nEXPOSE 80\nHEALTHCHECK CMD wget -qO- 0.0.0.0:80/ready\nCMD [\"srv\"]\nFROM serve AS dev\nENV X=1\nFROM alpine AS util\nHEALTHCHECK CMD [\"ls\", \"/done\"]\nCMD [\"true\"]\n"
	img := servedImage(df, "dev")
	if img.cmd != "srv" || healthURL(img.health) != "http://localhost:80/ready" || len(img.ports) != 1 {
		t.Fatalf("%+v", img)
	}
	if last := servedImage(df, ""); last.cmd != "true" || healthURL(last.health) != "" {
		t.Fatalf("last stage %+v", last)
	}
	dir := repo(t, map[string]string{"Dockerfile": "FROM a\nCMD [\"cpu\"]\n", "Dockerfile.cuda": "FROM a\nCMD [\"gpu\"]\n"})
	if p, _ := Init(dir); p.Canary.Smoke != "gpu" {
		t.Fatalf("smoke %q", p.Canary.Smoke)
	}
	// No tests: no unit command, even with a pyproject.toml.
	if p, _ := Init(repo(t, map[string]string{"pyproject.toml": "[project]\nname='x'\n", "Dockerfile": "FROM a\n"})); p.Canary.Unit != "" {
		t.Fatalf("unit %q with no tests", p.Canary.Unit)
	}
}

func TestInitImageFromCI(t *testing.T) {
	dir := repo(t, map[string]string{"Dockerfile": "FROM a\nCMD [\"srv\"]\n"})
	os.MkdirAll(filepath.Join(dir, ".github", "workflows"), 0o755)
	os.WriteFile(filepath.Join(dir, ".github", "workflows", "release.yml"), []byte("jobs:\n  push:\n    steps:\n      - uses: docker/build-push-action@v6\n        with:\n          tags: ${{ env.X }}\n      - uses: docker/build-push-action@v6\n        with:\n          tags: ghcr.io/example/srv:latest\n"), 0o644)
	p, err := Init(dir)
	if err != nil || p.Image != "ghcr.io/example/srv:latest" || !contains(p.Sources, ".github/workflows/release.yml") {
		t.Fatalf("image %q sources %v err %v", p.Image, p.Sources, err)
	}
}

func TestInitNeverPanicsOnOddDockerfiles(t *testing.T) {
	for _, df := range []string{"ENV", "ENV \n", "ENV =\n", "FROM\n", "FROM a AS\n", "HEALTHCHECK\n", "HEALTHCHECK CMD\n", "COPY\n", "EXPOSE x/y 99999\n", "\\\n", "CMD [\n", "FROM a AS b\nFROM b AS a\nCMD x\n"} {
		if _, err := Init(repo(t, map[string]string{"Dockerfile": df})); err != nil {
			t.Fatalf("%q: %v", df, err)
		}
	}
}

// FuzzInitDockerfile: init reads any Dockerfile without an error or a
// panic, and what it proposes as secrets are names.
func FuzzInitDockerfile(f *testing.F) {
	for _, seed := range []string{
		"ENV",
		"FROM python:3.12 AS serve\nENV A=1 B\nEXPOSE 80/tcp\nHEALTHCHECK CMD curl -f localhost:80/h\nCMD [\"a\",\"b c\"]\n",
		"FROM a\nFROM serve AS x\nENTRYPOINT [\"x\"]\nCOPY --from=a / /\nCOPY [\"a\", \"b\", \"/c\"]\n",
		"HEALTHCHECK NONE\nENV a b\n# c\nRUN a \\\n b\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, df string) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644)
		p, err := Init(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Secrets {
			if !isName(s) {
				t.Fatalf("secret %q is not a name", s)
			}
		}
		_ = p.YAML()
	})
}
