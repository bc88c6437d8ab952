package sim

import (
	"fmt"
	"strings"
)

// privateRepo is a repository the simulated registry serves only to one
// login, as a private GHCR or Docker Hub repository does.
type privateRepo struct {
	registry, user, token string
}

// SetPrivateImage makes repo (an image reference without tag or digest,
// e.g. "ghcr.io/acme/private") private: an instance created from it pulls
// only when the create request's image_login is "-u USER -p TOKEN REGISTRY"
// with these values and the repository's registry. Otherwise the instance
// stays "created" with the status message docker prints for a denied pull.
func (s *Server) SetPrivateImage(repo, user, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.private == nil {
		s.private = map[string]privateRepo{}
	}
	s.private[repo] = privateRepo{registry: registryOf(repo), user: user, token: token}
}

// ImageSize is the compressed size of image as the simulated registry
// knows it (the image_size fault), 0 when it knows none: what a client
// under --sim reads instead of a real registry's manifest.
func (s *Server) ImageSize(image string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.imageSizes[image]
}

// pullDenied returns the docker error for pulling image with login, or ""
// when the pull is allowed. Called with s.mu held.
func (s *Server) pullDenied(image string, login *string) string {
	repo := repoOf(image)
	p, ok := s.private[repo]
	if !ok {
		return ""
	}
	if login != nil {
		// Vast runs `docker login` with these arguments before the pull.
		f := strings.Fields(*login)
		if len(f) == 5 && f[0] == "-u" && f[2] == "-p" && f[1] == p.user && f[3] == p.token && f[4] == p.registry {
			return ""
		}
	}
	if p.registry == "docker.io" {
		return fmt.Sprintf("Error response from daemon: pull access denied for %s, repository does not exist or may require 'docker login': denied: requested access to the resource is denied", strings.TrimPrefix(repo, "docker.io/"))
	}
	return fmt.Sprintf("Error response from daemon: Head \"https://%s/v2/%s/manifests/%s\": unauthorized", p.registry, strings.TrimPrefix(repo, p.registry+"/"), refOf(image))
}

// repoOf strips the tag or digest: "ghcr.io/a/b@sha256:..." → "ghcr.io/a/b".
func repoOf(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

func refOf(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[i+1:]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return "latest"
}

func registryOf(repo string) string {
	first, _, found := strings.Cut(repo, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}
