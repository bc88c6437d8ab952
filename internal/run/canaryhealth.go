package run

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/vastrun/vastrun/internal/remote"
)

// HealthCheck is what the canary's health_url answered on the instance,
// reached through an SSH port forward (the URL names a host:port as the
// instance sees it, usually its own loopback).
type HealthCheck struct {
	URL      string `json:"url"`
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Passed   bool   `json:"passed"`
	Error    string `json:"error,omitempty"`
}

// healthWait bounds how long the service may take to answer 2xx when
// canary.health_timeout is not set.
const healthWait = time.Minute

// checkHealth GETs canary.health_url on the instance through a forward,
// retrying until it answers 2xx or healthWait passes.
func (e *Engine) checkHealth(ctx context.Context, c *remote.Client) *HealthCheck {
	raw := e.Config.Canary.HealthURL
	h := &HealthCheck{URL: raw}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		h.Error = fmt.Sprintf("canary.health_url %q must be an http:// URL (as the instance sees it)", raw)
		return h
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "80")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.Error = err.Error()
		return h
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Forward(fctx, ln, target, nil)
	local := *u
	local.Host = ln.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	wait := e.Config.Canary.HealthTimeout.Duration()
	if wait <= 0 {
		wait = healthWait
	}
	deadline := e.now().Add(wait)
	for {
		h.Attempts++
		req, _ := http.NewRequestWithContext(fctx, http.MethodGet, local.String(), nil)
		req.Host = u.Host // the service sees the URL's own host
		res, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
			res.Body.Close()
			h.Status, h.Error = res.StatusCode, ""
			if res.StatusCode >= 200 && res.StatusCode < 300 {
				h.Passed = true
				return h
			}
			h.Error = fmt.Sprintf("HTTP %d", res.StatusCode)
		} else {
			h.Error = e.Redactor.String(err.Error())
		}
		if !e.now().Before(deadline) || e.sleep(ctx, time.Second) != nil {
			return h
		}
	}
}
