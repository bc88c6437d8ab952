// Package image pins container images to immutable bytes: it resolves a tag
// to its manifest digest through the OCI distribution API (with registry
// credentials from the docker config), and refuses references that can
// change under you.
package image

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ErrMutable means the reference names a tag, not a digest.
var ErrMutable = errors.New("image reference is mutable (a tag, not a digest)")

var digestRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`@sha256:[a-f0-9]{64}$`) })

// IsPinned reports whether ref ends in @sha256:<64 hex>.
func IsPinned(ref string) bool { return digestRE().MatchString(ref) }

// CheckPinned refuses a mutable reference, naming why.
func CheckPinned(ref string) error {
	if IsPinned(ref) {
		return nil
	}
	why := "it has no digest"
	if strings.HasSuffix(ref, ":latest") || !strings.Contains(lastPart(ref), ":") {
		why = "it is (or defaults to) the moving tag latest"
	}
	return fmt.Errorf("%q: %w: %s; pass --resolve to pin it, or write repo@sha256:<digest>", ref, ErrMutable, why)
}

func lastPart(ref string) string {
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		return ref[i+1:]
	}
	return ref
}

// Options for Resolve.
type Options struct {
	// Insecure allows plain-HTTP registries (local test registries).
	Insecure bool
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
	// Keychain supplies credentials; default: the docker config
	// (~/.docker/config.json, DOCKER_CONFIG) and its credential helpers.
	Keychain authn.Keychain
	// Login, when set, is tried first for its registry: the config's
	// image_login, the same credentials Vast pulls with.
	Login *Login
}

// RemoteOptions are the registry client's options for a call under ctx:
// the login first for its registry, then the keychain (default: the
// docker config), and the transport when one is set. Resolve and
// publish.Push ask a registry the same way.
func (o Options) RemoteOptions(ctx context.Context) []remote.Option {
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	if o.Login != nil {
		kc = authn.NewMultiKeychain(o.Login, kc)
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	if o.Transport != nil {
		ropts = append(ropts, remote.WithTransport(o.Transport))
	}
	return ropts
}

// Login is a user and token for one registry.
type Login struct {
	Registry, User, Token string
}

// Resolve implements authn.Keychain for the login's registry only.
func (l *Login) Resolve(r authn.Resource) (authn.Authenticator, error) {
	reg := r.RegistryStr()
	if reg == l.Registry || (l.Registry == "docker.io" && reg == name.DefaultRegistry) {
		return &authn.Basic{Username: l.User, Password: l.Token}, nil
	}
	return authn.Anonymous, nil
}

// Resolve returns ref pinned by digest: "repo:tag" → "repo@sha256:...". A
// reference that already carries a digest is returned as is (after the
// registry confirms it exists).
func Resolve(ctx context.Context, ref string, o Options) (string, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	ropts := o.RemoteOptions(ctx)
	desc, err := remote.Head(r, ropts...)
	if err != nil {
		// Some registries refuse HEAD on manifests; GET is the fallback.
		d, gerr := remote.Get(r, ropts...)
		if gerr != nil {
			return "", fmt.Errorf("resolve image %q: %w", ref, err)
		}
		desc = &d.Descriptor
	}
	return r.Context().Name() + "@" + desc.Digest.String(), nil
}

// CompressedSize is what pulling ref downloads: the compressed sizes of its
// layers and config as its registry manifest lists them (for an index, the
// linux/amd64 image's). Only manifests are read, never a layer.
func CompressedSize(ctx context.Context, ref string, o Options) (int64, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return 0, fmt.Errorf("image %q: %w", ref, err)
	}
	desc, err := remote.Get(r, o.RemoteOptions(ctx)...)
	if err != nil {
		return 0, fmt.Errorf("read the manifest of %q: %w", ref, err)
	}
	img, err := desc.Image() // an index resolves to its linux/amd64 image
	if err != nil {
		return 0, fmt.Errorf("read the manifest of %q: %w", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, fmt.Errorf("read the manifest of %q: %w", ref, err)
	}
	total := m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	return total, nil
}
