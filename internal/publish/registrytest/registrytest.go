// Package registrytest serves a real OCI distribution registry
// (go-containerregistry's pkg/registry) on 127.0.0.1 for tests, with
// optional basic auth and a fault that answers a wrong digest for tags, and
// builds small images in the test (no engine needed).
package registrytest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options shape the registry.
type Options struct {
	User, Password string // when set, every request needs basic auth
	// WrongDigest makes HEAD and GET of a manifest by tag answer this
	// digest in Docker-Content-Digest: a registry that rewrote the bytes.
	WrongDigest string
}

// Start serves a registry; Host is "127.0.0.1:PORT". Close it when done.
func Start(o Options) *httptest.Server {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.Handler(reg)
	if o.WrongDigest != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if (r.Method == http.MethodHead || r.Method == http.MethodGet) && isTagManifest(r.URL.Path) {
				inner.ServeHTTP(&digestRewriter{ResponseWriter: w, digest: o.WrongDigest}, r)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	if o.User != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != o.User || p != o.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="registrytest"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	return httptest.NewServer(h) // httptest listens on 127.0.0.1
}

func isTagManifest(path string) bool {
	i := strings.LastIndex(path, "/manifests/")
	return i >= 0 && !strings.HasPrefix(path[i+len("/manifests/"):], "sha256:")
}

type digestRewriter struct {
	http.ResponseWriter
	digest string
}

func (d *digestRewriter) WriteHeader(code int) {
	if code == http.StatusOK {
		d.Header().Set("Docker-Content-Digest", d.digest)
	}
	d.ResponseWriter.WriteHeader(code)
}

// Host is the registry address of a server from Start.
func Host(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// Image builds a one-layer image holding files (path → content), with cmd
// as its command.
func Image(files map[string]string, cmd ...string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for p, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o755, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Cmd = cmd
	return mutate.ConfigFile(img, cf)
}

// WriteLayout writes img as an OCI image layout in dir.
func WriteLayout(dir string, img v1.Image) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img)
}

// BusyboxImage builds a runnable image with no engine and no registry: a
// base layer holding the static busybox at busybox (with its applet
// links, /etc/passwd and /tmp), then a layer holding files (path →
// content). Its command is sh.
func BusyboxImage(busybox string, files map[string]string) (v1.Image, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	applets, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "tmp/", "root/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: mode, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	entries := []struct {
		name string
		body []byte
		mode int64
	}{{"bin/busybox", bin, 0o755}, {"etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644}}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	for _, a := range strings.Fields(string(applets)) {
		if a == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, Typeflag: tar.TypeSymlink}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	base := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(base)), nil })
	if err != nil {
		return nil, err
	}
	top, err := Image(files, "sh")
	if err != nil {
		return nil, err
	}
	topLayers, err := top.Layers()
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, append([]v1.Layer{layer}, topLayers...)...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Cmd = []string{"sh"}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// rawManifest is a manifest pushed as its bytes (remote.Put).
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error) { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) {
	return types.OCIManifestSchema1, nil
}

// PushSized pushes to host/repo a manifest whose one layer is bytes long
// (compressed) and returns its pinned reference: what a registry says of a
// large image without holding its bytes (the layer itself is never
// uploaded, and nothing here pulls it).
func PushSized(host, repo string, bytes int64) (string, error) {
	layer := sha256.Sum256([]byte(fmt.Sprintf("layer of %d bytes", bytes)))
	config := sha256.Sum256([]byte("config"))
	m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":%q,"size":6,"digest":"sha256:%x"},"layers":[{"mediaType":%q,"size":%d,"digest":"sha256:%x"}]}`,
		types.OCIManifestSchema1, types.OCIConfigJSON, config, types.OCILayer, bytes, layer)
	ref, err := name.ParseReference(host+"/"+repo+":sized", name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Put(ref, rawManifest(m)); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(m))
	return fmt.Sprintf("%s/%s@sha256:%x", host, repo, sum), nil
}
