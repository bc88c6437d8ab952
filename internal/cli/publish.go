package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/publish"
)

// PublishOptions are the flags of `vastrun publish` (and canary --publish).
type PublishOptions struct {
	f          *Factory
	ConfigPath string
	Source     string
	Repo       string
	AllowDirty bool
	Write      bool
	Insecure   bool
}

func (o *PublishOptions) addFlags(cmd *cobra.Command, prefix string) {
	fl := cmd.Flags()
	fl.StringVar(&o.Source, prefix+"source", "", "OCI layout dir, docker/podman save tarball, or local engine image (default canary.image_source)")
	fl.StringVar(&o.Repo, prefix+"repo", "", "registry/repository to push to, no tag (default: image:'s repository)")
	fl.BoolVar(&o.AllowDirty, "allow-dirty", false, "publish from a tree with uncommitted changes, tagged <sha>-dirty")
	fl.BoolVar(&o.Write, "write", false, "also pin image: in the config file to the pushed digest (comments kept)")
}

// NewCmdPublish builds `vastrun publish`.
func NewCmdPublish(f *Factory, runF func(context.Context, *PublishOptions) error) *cobra.Command {
	o := &PublishOptions{f: f}
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Push the image you built under its commit and pin it by digest",
		Long: `Push an image you built (canary.image_source or --source: an OCI layout
directory, a docker/podman save tarball, or an image in the local engine) to
the repository of image: (or --repo) under the tag <git sha>, read the digest
back from the registry, check it equals the local manifest's digest, and print
the pinned reference <repo>@sha256:... on stdout (--json: schema
vastrun.publish/v1). With --write, image: in the config file is set to it.
A tree with uncommitted changes is refused unless --allow-dirty (tag
<sha>-dirty); a repository given with a tag, latest included, is refused.
Credentials: the config's image_login variables for its registry, then the
docker config (~/.docker/config.json, DOCKER_CONFIG) and its helpers.`,
		Example: `  vastrun publish --source build/oci            # an OCI layout (buildah/buildkit output)
  podman save -o app.tar app:dev && vastrun publish --source app.tar --write
  vastrun canary --publish --yes                  # publish, then run the canary on the digest`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(o, nil, runF, runPublishCmd),
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file (docs/config.md)")
	cmd.Flags().BoolVar(&o.Insecure, "insecure-registry", false, "allow a plain-HTTP registry")
	o.addFlags(cmd, "")
	return cmd
}

func runPublishCmd(ctx context.Context, o *PublishOptions) error {
	f := o.f
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return configError(o.ConfigPath, err)
	}
	res, err := runPublish(ctx, f, o, cfg)
	if err != nil {
		return err
	}
	if f.JSON {
		enc := json.NewEncoder(f.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	_, err = fmt.Fprintln(f.IO.Out, res.Pinned)
	return err
}

// runPublish pushes and pins; cfg.Image is set to the pinned reference
// (and the file too, with --write).
func runPublish(ctx context.Context, f *Factory, o *PublishOptions, cfg *config.Config) (*publish.Result, error) {
	src := o.Source
	if src == "" {
		src = cfg.Canary.ImageSource
	}
	repo := o.Repo
	if repo == "" {
		repo = publish.RepoOf(cfg.Image)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	po := publish.Options{Source: src, Repo: repo, RepoDir: wd, AllowDirty: o.AllowDirty, Insecure: o.Insecure}
	if l := cfg.ImageLogin; l.IsSet() && config.ImageRegistry(repo) == l.Registry {
		user, token := f.Getenv(l.UserEnv), f.Getenv(l.TokenEnv)
		f.IO.Redactor().Add(token) // before anything could print it
		var missing []string
		for _, kv := range [][2]string{{l.UserEnv, user}, {l.TokenEnv, token}} {
			if kv[1] == "" {
				missing = append(missing, kv[0])
			}
		}
		if len(missing) > 0 {
			return nil, &UsageError{Err: fmt.Errorf("image_login for %s: %s not set in the environment", l.Registry, strings.Join(missing, " and ")),
				Hint: "export the variables image_login names (their values never go in vastrun.yaml or on the command line)"}
		}
		po.Login = &image.Login{Registry: l.Registry, User: user, Token: token}
	}
	f.IO.Infof("publishing %s to %s", src, repo)
	res, err := publish.Publish(ctx, po)
	if err != nil {
		return nil, publishErr(err)
	}
	f.IO.Infof("pushed %s; the registry serves %s, the digest of the local manifest", res.Tag, res.Digest)
	cfg.Image = res.Pinned
	if o.Write {
		if err := publish.PinConfig(o.ConfigPath, res.Pinned); err != nil {
			return nil, err
		}
		f.IO.Infof("pinned image: in %s to %s", o.ConfigPath, res.Pinned)
	}
	return res, nil
}

// publishErr gives the caller's mistakes their class and a hint.
func publishErr(err error) error {
	switch {
	case errors.Is(err, publish.ErrDirty):
		return &UsageError{Err: err, Hint: "commit (or stash) the changes so the tag names the bytes, or pass --allow-dirty"}
	case errors.Is(err, publish.ErrLatest), errors.Is(err, publish.ErrTagged):
		return &UsageError{Err: err, Hint: "give --repo REGISTRY/REPO without a tag; the tag is the git commit"}
	case errors.Is(err, publish.ErrNotGit):
		return &UsageError{Err: err, Hint: "run from the git repository the image was built from, with a commit"}
	case errors.Is(err, publish.ErrSource):
		return &UsageError{Err: err, Hint: "set canary.image_source or pass --source: an OCI layout directory, a 'docker save'/'podman save' tarball, or a local image name"}
	}
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return &hintedError{err: err, hint: "the registry refused the credentials: set the variables image_login names, or 'docker login' (the docker config and its credential helpers are read)"}
	}
	// A digest mismatch (publish.ErrDigestMismatch) keeps its own message:
	// nothing is pinned and nothing is rented.
	return err
}
