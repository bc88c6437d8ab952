package vast

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestResolveAPIKeyOrder(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	if _, _, err := ResolveAPIKey("", getenv, home); !errors.Is(err, ErrNoAPIKey) {
		t.Fatalf("no key anywhere: err = %v", err)
	}
	legacy := filepath.Join(home, ".vast_api_key")
	os.WriteFile(legacy, []byte("legacy\n"), 0o600)
	if k, src, _ := ResolveAPIKey("", getenv, home); k != "legacy" || string(src) != legacy {
		t.Fatalf("legacy file: %q from %q", k, src)
	}
	cfgFile := filepath.Join(home, ".config", "vastai", "vast_api_key")
	os.MkdirAll(filepath.Dir(cfgFile), 0o700)
	os.WriteFile(cfgFile, []byte(" fromconfig \n"), 0o600)
	if k, _, _ := ResolveAPIKey("", getenv, home); k != "fromconfig" {
		t.Fatalf("config file should win over legacy, got %q", k)
	}
	xdg := t.TempDir()
	os.MkdirAll(filepath.Join(xdg, "vastai"), 0o700)
	os.WriteFile(filepath.Join(xdg, "vastai", "vast_api_key"), []byte("xdg"), 0o600)
	env["XDG_CONFIG_HOME"] = xdg
	if k, _, _ := ResolveAPIKey("", getenv, home); k != "xdg" {
		t.Fatalf("XDG_CONFIG_HOME should be honoured, got %q", k)
	}
	env["VAST_API_KEY"] = "fromenv"
	if k, src, _ := ResolveAPIKey("", getenv, home); k != "fromenv" || src != "VAST_API_KEY" {
		t.Fatalf("env should win: %q %q", k, src)
	}
	if k, src, _ := ResolveAPIKey("flag", getenv, home); k != "flag" || src != "--api-key" {
		t.Fatalf("explicit should win: %q %q", k, src)
	}
}
