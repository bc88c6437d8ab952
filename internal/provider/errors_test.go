package provider

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestAPIErrorClassification(t *testing.T) {
	cases := []struct {
		err  *APIError
		is   []error
		isnt []error
	}{
		{&APIError{Status: 404, Code: "auth_error", Msg: "Invalid user key"}, []error{ErrAuth}, []error{ErrNotFound}},
		{&APIError{Status: 403, Code: "auth_error"}, []error{ErrAuth}, []error{ErrNotFound}},
		{&APIError{Status: 401}, []error{ErrAuth}, nil},
		{&APIError{Status: 404, Code: "not_found"}, []error{ErrNotFound}, []error{ErrAuth}},
		{&APIError{Status: 400, Code: "no_such_instance"}, []error{ErrNotFound}, nil},
		{&APIError{Status: 410, Code: "no_such_ask"}, []error{ErrOfferGone}, []error{ErrNotFound}},
		{&APIError{Status: 404, Code: "no_such_ask"}, []error{ErrOfferGone}, []error{ErrNotFound}},
		{&APIError{Status: 429}, []error{ErrRateLimited}, []error{ErrAuth}},
		{&APIError{Status: 200, Code: "invalid_args"}, nil, []error{ErrAuth, ErrNotFound, ErrOfferGone}},
	}
	for _, c := range cases {
		wrapped := fmt.Errorf("outer: %w", c.err)
		for _, target := range c.is {
			if !errors.Is(wrapped, target) {
				t.Errorf("%v: want Is(%v)", c.err, target)
			}
		}
		for _, target := range c.isnt {
			if errors.Is(wrapped, target) {
				t.Errorf("%v: want !Is(%v)", c.err, target)
			}
		}
	}
}

func TestOutcomeUnknownNamesLabel(t *testing.T) {
	err := fmt.Errorf("rent: %w", &OutcomeUnknownError{Op: "create instance from offer 7", Label: "vastrun-x", InstanceID: 42, Err: errors.New("EOF")})
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatal("not classified as outcome unknown")
	}
	var oe *OutcomeUnknownError
	if !errors.As(err, &oe) || oe.Label != "vastrun-x" || oe.InstanceID != 42 {
		t.Fatalf("As = %+v", oe)
	}
	for _, want := range []string{"vastrun-x", "42", "EOF"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err.Error(), want)
		}
	}
}

func TestSSHEndpointsDirectFirst(t *testing.T) {
	i := Instance{PublicIP: "127.0.0.1", SSHHost: "127.0.0.1", SSHPort: 2200,
		Ports: map[string][]PortBinding{"22/tcp": {{HostIP: "0.0.0.0", HostPort: 2201}}}}
	eps := i.SSHEndpoints()
	if len(eps) != 2 || eps[0].Via != "direct" || eps[0].Port != 2201 || eps[1].Port != 2200 {
		t.Fatalf("endpoints = %+v", eps)
	}
	if (Instance{ActualStatus: "running"}).Running() {
		t.Fatal("running without SSH endpoints must not count as running")
	}
}
