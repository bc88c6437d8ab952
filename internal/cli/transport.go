package cli

import (
	"errors"
	"net"
	"net/url"
)

// isTransport reports a failure to reach the API at all.
func isTransport(err error) bool {
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.As(err, &oe)
}
