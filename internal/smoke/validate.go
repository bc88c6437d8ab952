package smoke

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vastrun/vastrun/internal/config"
	imageref "github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/redact"
)

// Validate checks a canary contract the way the run will use it, so that a
// contract validate accepts is one the run accepts: the image is pinned,
// every name the image needs is in env: (an empty value counts, when it
// is written there) or is a declared secret, and every declared secret is
// set in getenv, long enough to be masked (the run refuses to start
// otherwise). Variables set only
// in this shell count for nothing: neither side of the run sees them.
func Validate(cfg *config.Config, getenv func(string) string) []string {
	var problems []string
	if !cfg.IsCanary() {
		problems = append(problems, "canary.smoke is empty")
	}
	if err := imageref.CheckPinned(cfg.Image); err != nil {
		problems = append(problems, err.Error())
	}
	for _, name := range cfg.Canary.EnvNames {
		if _, inEnv := cfg.Env[name]; !inEnv && !slices.Contains(cfg.Secrets, name) {
			problems = append(problems, fmt.Sprintf("the image needs %s, but it is neither in env: nor a declared secret (a variable set only in this shell reaches neither side)", name))
		}
	}
	var unset []string
	for _, name := range cfg.Secrets {
		switch v := getenv(name); {
		case v == "":
			unset = append(unset, name)
		case len(v) < redact.MinSecretLen:
			problems = append(problems, fmt.Sprintf("secret %s is %d bytes: the run refuses secrets under %d bytes (too short to mask)", name, len(v), redact.MinSecretLen))
		}
	}
	if len(unset) > 0 {
		problems = append(problems, fmt.Sprintf("secrets %s are declared but not set in this environment: the run would refuse to start", strings.Join(unset, ", ")))
	}
	ignored := append(append([]string{}, cfg.Canary.IgnoreFields...), cfg.Canary.Compare.Ignore...)
	for _, ig := range ignored {
		if slices.Contains(cfg.Canary.ExpectFields, ig) {
			problems = append(problems, fmt.Sprintf("field %q is both expected and ignored", ig))
		}
	}
	return problems
}
