// Package publish pushes image bytes a developer built to a registry under a
// commit-addressed tag, and pins them by digest. It is the "publish an
// immutable image" step of the canary dev loop.
//
// Contracts:
//   - The source is an OCI image layout directory, a docker/podman save
//     tarball (docker-archive, or oci-archive), or an image held by the
//     local container engine (saved to a docker-archive first).
//   - The tag is the commit: <repo>:<40-hex sha>. A tree with uncommitted
//     changes to tracked files is refused (ErrDirty) unless AllowDirty,
//     which tags <sha>-dirty. A repository given with a tag is refused, and
//     "latest" is named in the refusal (ErrLatest): a moving tag is what
//     this step exists to avoid.
//   - After the push, the digest the registry serves for the tag is read
//     back and must equal the digest of the local manifest; otherwise the
//     result is *MismatchError (wraps ErrDigestMismatch) and nothing is
//     pinned. The pinned reference is <repo>@<that digest>.
//   - Credentials come from an authn.Keychain (default: the docker config
//     and its credential helpers), with the config's image_login tried
//     first for its registry. They are never logged or put into argv.
package publish

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/vastrun/vastrun/internal/container"
	"github.com/vastrun/vastrun/internal/image"
)

// Schema versions Result's JSON (the stdout of `vastrun publish --json`).
const Schema = "vastrun.publish/v1"

// Sentinel errors; callers classify with errors.Is.
var (
	ErrDirty          = errors.New("the working tree has uncommitted changes")
	ErrLatest         = errors.New("pushing the moving tag latest is refused")
	ErrTagged         = errors.New("the repository must not carry a tag: the tag is the commit")
	ErrNotGit         = errors.New("not a git repository with a commit")
	ErrSource         = errors.New("image source")
	ErrDigestMismatch = errors.New("the registry serves a different digest than was pushed")
)

// MismatchError is a read-back digest that differs from the local one.
type MismatchError struct {
	Tag, Local, Remote string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("publish %s: %v: pushed %s, registry answers %s", e.Tag, ErrDigestMismatch, e.Local, e.Remote)
}
func (e *MismatchError) Unwrap() error { return ErrDigestMismatch }

// Options for Publish.
type Options struct {
	// Source: an OCI layout directory, a save tarball, or (when no such
	// path exists) the name of an image in the local container engine.
	Source string
	// Repo is registry/repository, without tag or digest.
	Repo string
	// RepoDir is the git working tree whose HEAD names the tag.
	RepoDir    string
	AllowDirty bool
	// Insecure allows a plain-HTTP registry (loopback registries are
	// plain HTTP anyway).
	Insecure  bool
	Transport http.RoundTripper
	Keychain  authn.Keychain // default authn.DefaultKeychain
	Login     *image.Login   // tried first for its registry
	// Engine finds the local engine for an engine image (default
	// container.Detect).
	Engine func(ctx context.Context) (*container.Engine, error)
	// TempDir holds archives saved from the engine (default os.TempDir).
	TempDir string
}

// Result is what was pushed and pinned.
type Result struct {
	Schema     string `json:"schema"`
	Source     string `json:"source"`
	SourceKind string `json:"source_kind"` // oci-layout, docker-archive, oci-archive, engine:<name>
	Commit     string `json:"commit"`
	Dirty      bool   `json:"dirty"`
	Tag        string `json:"tag"`    // <repo>:<commit>
	Digest     string `json:"digest"` // sha256:..., local == registry
	Pinned     string `json:"pinned"` // <repo>@<digest>
}

// pushable is an image or an index: both have a digest and remote.Write*.
type pushable interface {
	Digest() (v1.Hash, error)
}

// Publish pushes o.Source and returns the pinned reference.
func Publish(ctx context.Context, o Options) (*Result, error) {
	repo, err := ParseRepo(o.Repo, o.Insecure)
	if err != nil {
		return nil, err
	}
	commit, dirty, err := GitState(ctx, o.RepoDir)
	if err != nil {
		return nil, err
	}
	if dirty && !o.AllowDirty {
		return nil, fmt.Errorf("publish from %s: %w (commit them, or pass --allow-dirty to tag %s-dirty)", o.RepoDir, ErrDirty, commit)
	}
	tagName := commit
	if dirty {
		tagName += "-dirty"
	}
	tag := repo.Tag(tagName)
	art, kind, cleanup, err := load(ctx, o)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	local, err := art.Digest()
	if err != nil {
		return nil, fmt.Errorf("%w %s: compute the manifest digest: %w", ErrSource, o.Source, err)
	}
	ropts := image.Options{Keychain: o.Keychain, Login: o.Login, Transport: o.Transport}.RemoteOptions(ctx)
	switch a := art.(type) {
	case v1.ImageIndex:
		err = remote.WriteIndex(tag, a, ropts...)
	case v1.Image:
		err = remote.Write(tag, a, ropts...)
	}
	if err != nil {
		return nil, fmt.Errorf("push %s: %w", tag, err)
	}
	got, err := readBack(tag, ropts)
	if err != nil {
		return nil, fmt.Errorf("read back %s: %w", tag, err)
	}
	if got != local {
		return nil, &MismatchError{Tag: tag.String(), Local: local.String(), Remote: got.String()}
	}
	return &Result{Schema: Schema, Source: o.Source, SourceKind: kind, Commit: commit, Dirty: dirty,
		Tag: tag.String(), Digest: local.String(), Pinned: repo.Name() + "@" + local.String()}, nil
}

// readBack asks the registry which digest the tag names now.
func readBack(tag name.Tag, ropts []remote.Option) (v1.Hash, error) {
	desc, err := remote.Head(tag, ropts...)
	if err == nil {
		return desc.Digest, nil
	}
	// Some registries refuse HEAD on manifests; GET is the fallback.
	d, gerr := remote.Get(tag, ropts...)
	if gerr != nil {
		return v1.Hash{}, errors.Join(err, gerr)
	}
	return d.Digest, nil
}

// ParseRepo accepts registry/repository without a tag or digest.
func ParseRepo(s string, insecure bool) (name.Repository, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return name.Repository{}, fmt.Errorf("publish: no repository (set image: or pass --repo REGISTRY/REPO)")
	}
	if strings.Contains(s, "@") {
		s = s[:strings.Index(s, "@")]
	}
	if i := strings.LastIndex(s, ":"); i > strings.LastIndex(s, "/") {
		if t := s[i+1:]; t == "latest" {
			return name.Repository{}, fmt.Errorf("repository %q: %w (the tag is the commit)", s, ErrLatest)
		} else if t != "" {
			return name.Repository{}, fmt.Errorf("repository %q: %w", s, ErrTagged)
		}
	}
	r, err := name.NewRepository(s, opts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("repository %q: %w", s, err)
	}
	return r, nil
}

// RepoOf is the repository of an image reference (its tag or digest
// dropped), the default target of a publish.
func RepoOf(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

var shaRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`) })

// GitState is HEAD's commit and whether tracked files differ from it.
// Untracked files do not count: evidence and state directories live there.
func GitState(ctx context.Context, dir string) (commit string, dirty bool, err error) {
	out, err := git(ctx, dir, "rev-parse", "HEAD")
	if err != nil || !shaRE().MatchString(out) {
		return "", false, fmt.Errorf("publish from %s: %w (git rev-parse HEAD: %v); the tag is the commit, so commit first", dir, ErrNotGit, err) //nolint:errorlint // the class is ErrNotGit; the cause is context only
	}
	st, err := git(ctx, dir, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", false, fmt.Errorf("publish from %s: git status: %w", dir, err)
	}
	return out, st != "", nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// load opens the source; cleanup removes anything it extracted.
func load(ctx context.Context, o Options) (pushable, string, func(), error) {
	none := func() {}
	src := o.Source
	if src == "" {
		return nil, "", none, fmt.Errorf("%w: none given (set canary.image_source, or pass --source: an OCI layout directory, a save tarball, or a local engine image)", ErrSource)
	}
	fi, err := os.Stat(src)
	switch {
	case err == nil && fi.IsDir():
		a, err := fromLayout(src)
		return a, "oci-layout", none, err
	case err == nil:
		return fromArchive(src, o.TempDir)
	case !errors.Is(err, os.ErrNotExist):
		return nil, "", none, fmt.Errorf("%w %s: %w", ErrSource, src, err)
	}
	// Not a path: an image of the local engine.
	detect := o.Engine
	if detect == nil {
		detect = func(ctx context.Context) (*container.Engine, error) { return container.Detect(ctx, "") }
	}
	eng, err := detect(ctx)
	if err != nil {
		return nil, "", none, fmt.Errorf("%w %q: no such file or directory, and no local engine to take it from: %w", ErrSource, src, err)
	}
	tmp, err := os.MkdirTemp(o.TempDir, "vastrun-publish-")
	if err != nil {
		return nil, "", none, err
	}
	cleanup := func() { os.RemoveAll(tmp) } //nolint:errcheck // best effort: a temp dir left behind is under TempDir, where the system's cleaner finds it
	archive := filepath.Join(tmp, "image.tar")
	if err := eng.Save(ctx, src, archive); err != nil {
		cleanup()
		return nil, "", none, fmt.Errorf("%w %q: %w", ErrSource, src, err)
	}
	img, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		cleanup()
		return nil, "", none, fmt.Errorf("%w %q (saved by %s): %w", ErrSource, src, eng.Name, err)
	}
	return img, "engine:" + eng.Name, cleanup, nil
}

// fromLayout reads an OCI layout: its single image, or its index when the
// layout holds several manifests (a multi-platform build).
func fromLayout(dir string) (pushable, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w %s: not an OCI image layout (no index.json?): %w", ErrSource, dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrSource, dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrSource, dir, err)
	}
	switch len(im.Manifests) {
	case 0:
		return nil, fmt.Errorf("%w %s: the layout holds no manifest", ErrSource, dir)
	case 1:
		d := im.Manifests[0]
		if d.MediaType.IsIndex() {
			return idx.ImageIndex(d.Digest)
		}
		return idx.Image(d.Digest)
	}
	return idx, nil
}

// fromArchive reads a docker-archive, or an oci-archive (a tarred layout,
// extracted first).
func fromArchive(path, tmpDir string) (pushable, string, func(), error) {
	none := func() {}
	isOCI, err := tarHas(path, "oci-layout")
	if err != nil {
		return nil, "", none, fmt.Errorf("%w %s: not a tar archive: %w", ErrSource, path, err)
	}
	if !isOCI {
		img, err := tarball.ImageFromPath(path, nil)
		if err != nil {
			return nil, "", none, fmt.Errorf("%w %s: not a docker/podman save archive: %w", ErrSource, path, err)
		}
		return img, "docker-archive", none, nil
	}
	tmp, err := os.MkdirTemp(tmpDir, "vastrun-oci-")
	if err != nil {
		return nil, "", none, err
	}
	cleanup := func() { os.RemoveAll(tmp) } //nolint:errcheck // best effort: a temp dir left behind is under TempDir, where the system's cleaner finds it
	if err := untar(path, tmp); err != nil {
		cleanup()
		return nil, "", none, fmt.Errorf("%w %s: %w", ErrSource, path, err)
	}
	a, err := fromLayout(tmp)
	if err != nil {
		cleanup()
		return nil, "", none, err
	}
	return a, "oci-archive", cleanup, nil
}

func tarHas(path, want string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close() //nolint:errcheck // read-only file
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if filepath.Clean(h.Name) == want {
			return true, nil
		}
	}
}

// untar extracts regular files and directories only, inside dir.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck // read-only file
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean(h.Name)
		if rel == "." || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("archive entry %q escapes the layout", h.Name)
		}
		dst := filepath.Join(dir, rel)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, cerr := io.Copy(out, tr)
			if err := errors.Join(cerr, out.Close()); err != nil {
				return err
			}
		}
	}
}
