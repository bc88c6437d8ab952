package cli

import (
	"errors"
	"io/fs"
	"net"
	"net/url"
	"syscall"

	"github.com/vastrun/vastrun/internal/provider"
)

// isTransport reports a failure to reach the API at all. It is judged by
// type: the client's *provider.TransportError, an HTTP request that failed
// (*url.Error) or a network operation that did (*net.OpError,
// *net.DNSError). A local file error is never one,
// although syscall.Errno satisfies net.Error, and neither is a port this
// process could not listen on.
func isTransport(err error) bool {
	var ue *url.Error
	var oe *net.OpError
	var de *net.DNSError
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe) && !errors.As(err, &ue), errors.Is(err, syscall.EADDRINUSE):
		return false
	case errors.As(err, &oe) && oe.Op == "listen":
		return false
	}
	return errors.Is(err, provider.ErrTransport) || errors.As(err, &ue) || errors.As(err, &oe) || errors.As(err, &de)
}
