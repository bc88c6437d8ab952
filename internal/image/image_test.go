package image

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vastrun/vastrun/internal/publish/registrytest"
)

// push writes a random image to ref on the in-process registry and returns
// its digest.
func push(t *testing.T, ref string) string {
	t.Helper()
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

func TestResolveFollowsAMovingTag(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	first := push(t, host+"/acme/trainer:v1")
	got, err := Resolve(ctx, host+"/acme/trainer:v1", Options{Insecure: true})
	if err != nil || got != host+"/acme/trainer@"+first {
		t.Fatalf("resolve v1: %q %v (want digest %s)", got, err, first)
	}
	// The tag moves: the same tag now resolves to different bytes, which is
	// exactly why a tag is never evidence.
	second := push(t, host+"/acme/trainer:v1")
	again, err := Resolve(ctx, host+"/acme/trainer:v1", Options{Insecure: true})
	if err != nil || again != host+"/acme/trainer@"+second || second == first {
		t.Fatalf("after the tag moved: %q %v", again, err)
	}
	// A pinned reference keeps naming the first bytes.
	pinned, err := Resolve(ctx, host+"/acme/trainer@"+first, Options{Insecure: true})
	if err != nil || pinned != got {
		t.Fatalf("pinned: %q %v", pinned, err)
	}
	if _, err := Resolve(ctx, host+"/acme/missing:v1", Options{Insecure: true}); err == nil {
		t.Fatal("a missing image resolved")
	}
}

func TestCheckPinned(t *testing.T) {
	ok := "ghcr.io/acme/app@sha256:" + strings.Repeat("ab", 32)
	if err := CheckPinned(ok); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"ghcr.io/acme/app", "ghcr.io/acme/app:latest", "ghcr.io/acme/app:v1.2", "localhost:5000/app"} {
		err := CheckPinned(ref)
		if !errors.Is(err, ErrMutable) || !strings.Contains(err.Error(), "--resolve") {
			t.Errorf("CheckPinned(%q) = %v", ref, err)
		}
	}
	if err := CheckPinned("localhost:5000/app"); !strings.Contains(err.Error(), "latest") {
		t.Errorf("an untagged reference defaults to latest: %v", err)
	}
}

// TestResolveWithLogin: a registry that demands basic auth (as a private
// GHCR repository does) resolves a tag only with the image_login
// credentials, and the anonymous attempt is refused.
func TestResolveWithLogin(t *testing.T) {
	reg := registry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ci-bot" || p != "s3cr3t-token" {
			w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	login := &Login{Registry: host, User: "ci-bot", Token: "s3cr3t-token"}

	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host+"/acme/private:v1", name.Insecure)
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(login)); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()

	anon := authn.NewMultiKeychain() // no docker config: anonymous
	if _, err := Resolve(ctx, host+"/acme/private:v1", Options{Insecure: true, Keychain: anon}); err == nil {
		t.Fatal("resolved a private image without a login")
	}
	wrong := &Login{Registry: host, User: "ci-bot", Token: "nope"}
	if _, err := Resolve(ctx, host+"/acme/private:v1", Options{Insecure: true, Keychain: anon, Login: wrong}); err == nil {
		t.Fatal("resolved a private image with a wrong token")
	}
	got, err := Resolve(ctx, host+"/acme/private:v1", Options{Insecure: true, Keychain: anon, Login: login})
	if err != nil || got != host+"/acme/private@"+d.String() {
		t.Fatalf("with the login: %q %v (want digest %s)", got, err, d)
	}
}

// TestCompressedSize: the size a pull downloads is the manifest's layers
// and config, read without a layer; a manifest that lists a 40 GB layer the
// registry never held says 40 GB.
func TestCompressedSize(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(host+"/small:v1", name.Insecure)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	want := m.Config.Size
	for _, l := range m.Layers {
		want += l.Size
	}
	d, _ := img.Digest()
	if got, err := CompressedSize(context.Background(), host+"/small@"+d.String(), Options{Insecure: true}); err != nil || got != want || want < 3*4096 {
		t.Fatalf("CompressedSize = %d, %v; want %d", got, err, want)
	}
	ref, err := registrytest.PushSized(host, "big", 40e9)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := CompressedSize(context.Background(), ref, Options{}); err != nil || got != 40e9+6 {
		t.Fatalf("CompressedSize(%s) = %d, %v; want 40 GB and the config", ref, got, err)
	}
	if _, err := CompressedSize(context.Background(), host+"/none@sha256:"+strings.Repeat("0", 64), Options{}); err == nil {
		t.Fatal("a manifest the registry lacks has a size")
	}
}
