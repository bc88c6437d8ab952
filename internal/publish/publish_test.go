package publish_test

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/vastrun/vastrun/internal/container"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/publish"
	"github.com/vastrun/vastrun/internal/publish/registrytest"
)

// gitRepo makes a committed repository and returns its dir and HEAD.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.invalid", "-c", "user.name=t"}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	run("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "app.txt"), []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "app.txt")
	run("commit", "-q", "-m", "one")
	return dir, run("rev-parse", "HEAD")
}

func testImage(t *testing.T, content string) v1.Image {
	t.Helper()
	img, err := registrytest.Image(map[string]string{"app/smoke.sh": content}, "sh", "/app/smoke.sh")
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// anonymous keeps the host's docker config out of the tests.
var anonymous = authn.NewMultiKeychain()

func TestPublishSources(t *testing.T) {
	srv := registrytest.Start(registrytest.Options{})
	defer srv.Close()
	repoDir, head := gitRepo(t)
	img := testImage(t, "echo ok\n")
	want := digestOf(t, img)
	work := t.TempDir()

	layoutDir := filepath.Join(work, "layout")
	if err := registrytest.WriteLayout(layoutDir, img); err != nil {
		t.Fatal(err)
	}
	dockerTar := filepath.Join(work, "image.tar")
	if err := tarball.WriteToFile(dockerTar, name.MustParseReference("example.invalid/app:x"), img); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(work, "oci.tar")
	tarDir(t, layoutDir, ociTar)

	for _, tc := range []struct {
		name, source, kind string
		sameDigest         bool
	}{
		{"oci layout", layoutDir, "oci-layout", true},
		{"oci archive", ociTar, "oci-archive", true},
		// A docker archive carries no manifest: its digest is the one
		// computed here, and what is checked is that the registry agrees.
		{"docker archive", dockerTar, "docker-archive", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := registrytest.Host(srv) + "/acme/" + strings.ReplaceAll(tc.kind, "-", "")
			res, err := publish.Publish(context.Background(), publish.Options{Source: tc.source, Repo: repo, RepoDir: repoDir, Keychain: anonymous})
			if err != nil {
				t.Fatal(err)
			}
			if res.SourceKind != tc.kind || res.Commit != head || res.Dirty || res.Tag != repo+":"+head {
				t.Fatalf("result %+v", res)
			}
			if tc.sameDigest && res.Digest != want {
				t.Fatalf("digest %s, want the layout's %s", res.Digest, want)
			}
			if res.Pinned != repo+"@"+res.Digest || !image.IsPinned(res.Pinned) {
				t.Fatalf("pinned %q", res.Pinned)
			}
			// The registry serves the pinned bytes by digest and by tag.
			for _, ref := range []string{res.Pinned, res.Tag} {
				r, _ := name.ParseReference(ref)
				d, err := remote.Head(r)
				if err != nil || d.Digest.String() != res.Digest {
					t.Fatalf("HEAD %s: %v %v", ref, d, err)
				}
			}
		})
	}
}

func tarDir(t *testing.T, dir, dest string) {
	t.Helper()
	f, err := os.Create(dest)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, _ := d.Info()
		h, _ := tar.FileInfoHeader(info, "")
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil || d.IsDir() {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err := errors.Join(err, tw.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
}

func TestPublishRefusals(t *testing.T) {
	srv := registrytest.Start(registrytest.Options{})
	defer srv.Close()
	repoDir, head := gitRepo(t)
	layoutDir := filepath.Join(t.TempDir(), "layout")
	if err := registrytest.WriteLayout(layoutDir, testImage(t, "echo ok\n")); err != nil {
		t.Fatal(err)
	}
	repo := registrytest.Host(srv) + "/acme/app"
	o := publish.Options{Source: layoutDir, Repo: repo, RepoDir: repoDir, Keychain: anonymous}
	ctx := context.Background()

	for _, r := range []struct {
		repo string
		want error
	}{{repo + ":latest", publish.ErrLatest}, {repo + ":v1", publish.ErrTagged}} {
		o := o
		o.Repo = r.repo
		if _, err := publish.Publish(ctx, o); !errors.Is(err, r.want) {
			t.Errorf("repo %s: %v, want %v", r.repo, err, r.want)
		}
	}

	if err := os.WriteFile(filepath.Join(repoDir, "app.txt"), []byte("v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Publish(ctx, o); !errors.Is(err, publish.ErrDirty) {
		t.Fatalf("dirty tree: %v, want ErrDirty", err)
	}
	tagRef, err := name.ParseReference(repo + ":" + head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(tagRef); err == nil {
		t.Fatal("a refused publish pushed the commit tag anyway")
	}
	o.AllowDirty = true
	res, err := publish.Publish(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Dirty || res.Tag != repo+":"+head+"-dirty" {
		t.Fatalf("allow-dirty result %+v", res)
	}

	o.RepoDir = t.TempDir() // no git
	if _, err := publish.Publish(ctx, o); !errors.Is(err, publish.ErrNotGit) {
		t.Fatalf("no git: %v, want ErrNotGit", err)
	}
	o.RepoDir, o.Source = repoDir, filepath.Join(t.TempDir(), "missing")
	o.Engine = func(context.Context) (*container.Engine, error) { return nil, container.ErrNoEngine }
	if _, err := publish.Publish(ctx, o); !errors.Is(err, publish.ErrSource) || !errors.Is(err, container.ErrNoEngine) {
		t.Fatalf("missing source: %v", err)
	}
}

func TestPublishDigestMismatch(t *testing.T) {
	wrong := "sha256:" + strings.Repeat("ab", 32)
	srv := registrytest.Start(registrytest.Options{WrongDigest: wrong})
	defer srv.Close()
	repoDir, _ := gitRepo(t)
	img := testImage(t, "echo ok\n")
	layoutDir := filepath.Join(t.TempDir(), "layout")
	if err := registrytest.WriteLayout(layoutDir, img); err != nil {
		t.Fatal(err)
	}
	_, err := publish.Publish(context.Background(), publish.Options{Source: layoutDir, Repo: registrytest.Host(srv) + "/acme/app", RepoDir: repoDir, Keychain: anonymous})
	var me *publish.MismatchError
	if !errors.As(err, &me) || !errors.Is(err, publish.ErrDigestMismatch) {
		t.Fatalf("got %v, want a MismatchError", err)
	}
	if me.Local != digestOf(t, img) || me.Remote != wrong {
		t.Fatalf("mismatch %+v", me)
	}
}

func TestPublishAuth(t *testing.T) {
	srv := registrytest.Start(registrytest.Options{User: "ci", Password: "s3cret-token"})
	defer srv.Close()
	repoDir, _ := gitRepo(t)
	layoutDir := filepath.Join(t.TempDir(), "layout")
	if err := registrytest.WriteLayout(layoutDir, testImage(t, "echo ok\n")); err != nil {
		t.Fatal(err)
	}
	host := registrytest.Host(srv)
	o := publish.Options{Source: layoutDir, Repo: host + "/acme/app", RepoDir: repoDir, Keychain: anonymous}
	ctx := context.Background()
	if _, err := publish.Publish(ctx, o); err == nil {
		t.Fatal("pushed without credentials")
	} else if strings.Contains(err.Error(), "s3cret-token") {
		t.Fatalf("error shows the token: %v", err)
	}

	// image_login: the config names the variables, the caller reads them.
	o.Login = &image.Login{Registry: host, User: "ci", Token: "s3cret-token"}
	if _, err := publish.Publish(ctx, o); err != nil {
		t.Fatalf("with image_login: %v", err)
	}

	// The docker config (DOCKER_CONFIG), as docker login writes it.
	cfgDir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("ci:s3cret-token"))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfgDir)
	o.Login, o.Keychain = nil, nil
	if _, err := publish.Publish(ctx, o); err != nil {
		t.Fatalf("with the docker config: %v", err)
	}

	// A credential helper named by the docker config (credHelpers): the
	// secret comes from the helper's stdout, never from argv.
	binDir := t.TempDir()
	helper := "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\n[ \"$server\" = \"" + host + "\" ] || { echo \"credentials not found in native keychain\"; exit 1; }\n" +
		"printf '{\"ServerURL\":\"%s\",\"Username\":\"ci\",\"Secret\":\"s3cret-token\"}' \"$server\"\n"
	if err := os.WriteFile(filepath.Join(binDir, "docker-credential-vastrun-test"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"credHelpers":{"`+host+`":"vastrun-test"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Publish(ctx, o); err != nil {
		t.Fatalf("with a credential helper: %v", err)
	}
}

// A fake engine: `podman save -o DEST --format docker-archive IMAGE`
// copies a prepared archive, so the engine path is exercised end to end
// without one installed.
func TestPublishFromEngine(t *testing.T) {
	srv := registrytest.Start(registrytest.Options{})
	defer srv.Close()
	repoDir, _ := gitRepo(t)
	work := t.TempDir()
	archive := filepath.Join(work, "prepared.tar")
	img := testImage(t, "echo engine\n")
	if err := tarball.WriteToFile(archive, name.MustParseReference("localhost/app:dev"), img); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(work, "podman")
	body := "#!/bin/sh\n[ \"$1 $2\" = 'save -o' ] && [ \"$4 $5 $6\" = '--format docker-archive localhost/app:dev' ] || { echo \"bad args: $*\" >&2; exit 2; }\ncp " + archive + " \"$3\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	o := publish.Options{Source: "localhost/app:dev", Repo: registrytest.Host(srv) + "/acme/app", RepoDir: repoDir, Keychain: anonymous, TempDir: work,
		Engine: func(context.Context) (*container.Engine, error) {
			return &container.Engine{Name: "podman", Path: script}, nil
		}}
	res, err := publish.Publish(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.SourceKind != "engine:podman" {
		t.Fatalf("kind %q", res.SourceKind)
	}
	left, _ := filepath.Glob(filepath.Join(work, "vastrun-publish-*"))
	if len(left) != 0 {
		t.Fatalf("saved archive left behind: %v", left)
	}
}

func TestPinConfigKeepsComments(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vastrun.yaml")
	in := "# the canary\nversion: 1\nimage: ghcr.io/acme/app:dev   # pinned by vastrun publish\ngpu:\n  max_dph: 0.5 # cheap\n"
	if err := os.WriteFile(p, []byte(in), 0o640); err != nil {
		t.Fatal(err)
	}
	ref := "ghcr.io/acme/app@sha256:" + strings.Repeat("0a", 32)
	if err := publish.PinConfig(p, ref); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	want := strings.Replace(in, "ghcr.io/acme/app:dev", ref, 1)
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// A nested image: is not the run's image.
	nested := filepath.Join(t.TempDir(), "n.yaml")
	os.WriteFile(nested, []byte("canary:\n  image: x\n"), 0o644)
	if err := publish.PinConfig(nested, ref); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(nested)
	if string(got) != "image: "+ref+"\ncanary:\n  image: x\n" {
		t.Fatalf("nested: %q", got)
	}
}

func TestRepoOf(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/acme/app:dev":                  "ghcr.io/acme/app",
		"127.0.0.1:5000/acme/app@sha256:abc":    "127.0.0.1:5000/acme/app",
		"127.0.0.1:5000/acme/app":               "127.0.0.1:5000/acme/app",
		"localhost:5000/app:latest@sha256:0000": "localhost:5000/app",
	} {
		if got := publish.RepoOf(in); got != want {
			t.Errorf("RepoOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPublishFromPodman publishes an image held by a real Podman (saved
// with `podman save`), then has Podman pull it back by the pinned digest
// from the registry: the bytes go both ways over the real OCI protocol.
// It runs with VASTRUN_TEST_PODMAN=required (.ci/run sets it once Podman
// has run a container); otherwise it is skipped, NOT RUN.
func TestPublishFromPodman(t *testing.T) {
	if mode := os.Getenv("VASTRUN_TEST_PODMAN"); mode != "required" {
		t.Skipf("NOT RUN: VASTRUN_TEST_PODMAN=%q, not required", mode)
	}
	local := "localhost/vastrun-publish-test:base"
	if out, err := exec.Command("../../scripts/container-base.sh", local).CombinedOutput(); err != nil {
		t.Fatalf("base image: %v: %s", err, out)
	}
	srv := registrytest.Start(registrytest.Options{})
	defer srv.Close()
	repoDir, head := gitRepo(t)
	repo := registrytest.Host(srv) + "/acme/from-podman"
	res, err := publish.Publish(context.Background(), publish.Options{Source: local, Repo: repo, RepoDir: repoDir, Keychain: anonymous, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.SourceKind != "engine:podman" || res.Tag != repo+":"+head {
		t.Fatalf("result %+v", res)
	}
	out, err := exec.Command("podman", "pull", "--quiet", "--tls-verify=false", res.Pinned).CombinedOutput()
	if err != nil {
		t.Fatalf("podman pull %s: %v: %s", res.Pinned, err, out)
	}
	// The local image keeps its own digest; the pulled reference is
	// recorded among its repo digests.
	digests, err := exec.Command("podman", "image", "inspect", "--format", "{{.RepoDigests}}", res.Pinned).Output()
	if err != nil || !strings.Contains(string(digests), res.Pinned) {
		t.Fatalf("podman's repo digests %q (%v) lack %s", digests, err, res.Pinned)
	}
}
