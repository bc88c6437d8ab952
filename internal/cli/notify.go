package cli

import (
	"fmt"
	"net/url"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/notify"
)

// notifications sets up notify: for a run: the URL from the environment
// variable it names, masked in every sink from here on. A variable that is
// unset or not a URL costs the run nothing: it is said once, and the
// receipt records it; nothing is sent.
func notifications(f *Factory, cfg *config.Config) *lifecycle.Notifications {
	n := cfg.Notify
	if n.WebhookEnv == "" {
		return nil
	}
	events := n.Events
	if len(events) == 0 {
		events = notify.DefaultEvents
	}
	out := &lifecycle.Notifications{WebhookEnv: n.WebhookEnv, Events: events}
	raw := f.Getenv(n.WebhookEnv)
	f.IO.Redactor().Add(raw)
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		out.Error = fmt.Sprintf("%s is not set: no notification was sent", n.WebhookEnv)
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		out.Error = fmt.Sprintf("%s is not an http(s) URL: no notification was sent", n.WebhookEnv)
	default:
		red := f.IO.Redactor()
		out.Sender = notify.New(notify.Config{URL: raw, Events: events, Clock: clock.Real{}, Redact: red.String})
		return out
	}
	f.IO.Infof("notify: %s (export the webhook URL in %s to get the run's events)", out.Error, n.WebhookEnv)
	return out
}
