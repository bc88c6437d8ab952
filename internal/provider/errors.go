package provider

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel error classes. See the package documentation.
var (
	ErrNotFound       = errors.New("not found")
	ErrAuth           = errors.New("authentication failed")
	ErrOfferGone      = errors.New("offer no longer available")
	ErrRateLimited    = errors.New("rate limited")
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrIncompleteListing means a listing could not be read in full. A
	// partial listing is never evidence that something is absent.
	ErrIncompleteListing = errors.New("listing incomplete")
	// ErrTransport means no HTTP answer was read (see [TransportError]).
	ErrTransport = errors.New("API not reached")
)

// HTTP statuses the classification needs; spelled out so that this
// package stays free of net/http.
const (
	statusUnauthorized    = 401
	statusForbidden       = 403
	statusNotFound        = 404
	statusTooManyRequests = 429
	statusServerError     = 500
)

// APIError is a failure answered by the marketplace API.
type APIError struct {
	Op     string // what we were doing, e.g. "show instance 123"
	Status int    // HTTP status (200 when the body said success:false)
	Code   string // the server's error slug, e.g. "no_such_ask", "auth_error"
	Msg    string // the server's human message, if any
	// RetryAfter is the wait the server asked for (a Retry-After header),
	// zero when it named none. Vast sends none today; a proxy may.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is classifies the error by status and slug so that callers can write
// errors.Is(err, provider.ErrNotFound).
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrAuth:
		return e.Code == "auth_error" || e.Code == "not_authorized" ||
			e.Status == statusUnauthorized || e.Status == statusForbidden
	case ErrNotFound:
		if e.Code == "auth_error" || e.Code == "no_such_ask" {
			return false
		}
		return e.Code == "no_such_instance" || e.Code == "not_found" ||
			e.Code == "invalid_id" || e.Status == statusNotFound
	case ErrOfferGone:
		return e.Code == "no_such_ask"
	case ErrRateLimited:
		return e.Status == statusTooManyRequests || e.Code == "rate_limit_exceeded"
	}
	return false
}

// Temporary reports whether the same request may succeed if sent again:
// a 429 or any 5xx. Whether sending it again is safe is the caller's
// question (see package retry): a create answered 5xx may have rented.
func (e *APIError) Temporary() bool {
	return e.Status == statusTooManyRequests || e.Status >= statusServerError
}

// TransportError is a call that read no HTTP answer: the connection was
// refused, reset or timed out, or the response was cut short. For a
// mutating call the request may or may not have been applied.
type TransportError struct {
	Op  string
	Err error
}

func (e *TransportError) Error() string { return e.Op + ": " + e.Err.Error() }

func (e *TransportError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTransport) true.
func (e *TransportError) Is(target error) bool { return target == ErrTransport }

// OutcomeUnknownError reports a mutating call (above all, create) whose
// effect cannot be known from the answer: a timeout, a lost response, a 5xx,
// a success without an id, or an error that nevertheless carries a contract
// id. The caller must reconcile by listing instances with Label; it must not
// repeat the call.
type OutcomeUnknownError struct {
	Op    string
	Label string
	// InstanceID is the contract id the server mentioned, if any (an error
	// body that still carried new_contract). Zero when unknown.
	InstanceID InstanceID
	Err        error
}

func (e *OutcomeUnknownError) Error() string {
	s := fmt.Sprintf("%s: outcome unknown (reconcile by label %q", e.Op, e.Label)
	if e.InstanceID != 0 {
		s += fmt.Sprintf(", server mentioned instance %d", e.InstanceID)
	}
	s += ")"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }
