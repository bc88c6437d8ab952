package lifecycle

import (
	"errors"
	"fmt"
	"strings"
)

// ErrImageLogin classifies a private-registry login that cannot be built
// from the environment (a variable unset, or a value docker login would
// split).
var ErrImageLogin = errors.New("image_login")

// imageLogin builds Vast's image_login ("-u USER -p TOKEN REGISTRY", the
// docker login arguments Vast runs before pulling) from the variables the
// config names. The token, and the whole string, join the redactor and the
// CI's mask list before anything could print them. Empty when the config has
// no image_login.
func imageLogin(e *Scope) (string, error) {
	l := e.Frozen().ImageLogin
	if l == nil {
		return "", nil
	}
	user, token := e.Getenv(l.UserEnv), e.Getenv(l.TokenEnv)
	var missing []string
	for _, kv := range [][2]string{{l.UserEnv, user}, {l.TokenEnv, token}} {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w for %s: %s not set in the environment", ErrImageLogin, l.Registry, strings.Join(missing, " and "))
	}
	if e.Redactor != nil {
		e.Redactor.Add(token)
	}
	if e.Annotations != nil {
		e.CI.Mask(e.Annotations, token)
	}
	if strings.ContainsAny(user+token, " \t\r\n") {
		return "", fmt.Errorf("%w for %s: the value of %s or %s contains whitespace, which docker login cannot take", ErrImageLogin, l.Registry, l.UserEnv, l.TokenEnv)
	}
	login := fmt.Sprintf("-u %s -p %s %s", user, token, l.Registry)
	if e.Redactor != nil {
		e.Redactor.Add(login)
	}
	return login, nil
}
