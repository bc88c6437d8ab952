package vast

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoAPIKey means no key was given anywhere vastrun looks.
var ErrNoAPIKey = errors.New("no Vast API key: pass --api-key, set VAST_API_KEY, or write the key to ~/.config/vastai/vast_api_key")

// KeySource says where ResolveAPIKey found the key (never the key itself).
type KeySource string

// KeyFiles are the files the API key is read from, in order.
func KeyFiles(getenv func(string) string, home string) []string {
	cfg := getenv("XDG_CONFIG_HOME")
	if cfg == "" && home != "" {
		cfg = filepath.Join(home, ".config")
	}
	var paths []string
	if cfg != "" {
		paths = append(paths, filepath.Join(cfg, "vastai", "vast_api_key"))
	}
	if home != "" {
		paths = append(paths, filepath.Join(home, ".vast_api_key"))
	}
	return paths
}

// ResolveAPIKey finds the key in the official CLI's order: an explicit
// value, $VAST_API_KEY, $XDG_CONFIG_HOME/vastai/vast_api_key (default
// ~/.config/vastai/vast_api_key), then the legacy ~/.vast_api_key.
// getenv and home are injected for tests.
func ResolveAPIKey(explicit string, getenv func(string) string, home string) (string, KeySource, error) {
	if k := strings.TrimSpace(explicit); k != "" {
		return k, "--api-key", nil
	}
	if k := strings.TrimSpace(getenv("VAST_API_KEY")); k != "" {
		return k, "VAST_API_KEY", nil
	}
	for _, p := range KeyFiles(getenv, home) {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", "", fmt.Errorf("read Vast API key file %s: %w", p, err)
		}
		if k := strings.TrimSpace(string(b)); k != "" {
			return k, KeySource(p), nil
		}
	}
	return "", "", ErrNoAPIKey
}
