package sim

import (
	"errors"
	"testing"

	"github.com/vastrun/vastrun/internal/container"
)

// Podman's pull errors become what docker prints on a Vast host.
func TestPullStatusMsgIsDockers(t *testing.T) {
	ref := "127.0.0.1:5000/acme/app@sha256:00"
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&container.PullError{Ref: ref, ManifestUnknown: true, Reason: "initializing source docker://" + ref + ": reading manifest sha256:00 in 127.0.0.1:5000/acme/app: manifest unknown"},
			"Error response from daemon: manifest for " + ref + " not found: manifest unknown: manifest unknown"},
		{&container.PullError{Ref: ref, Reason: "initializing source docker://" + ref + `: pinging container registry 127.0.0.1:5000: Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused`},
			`Error response from daemon: Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused`},
		{&container.PullError{Ref: ref, Reason: "initializing source docker://" + ref + ": reading manifest sha256:00 in 127.0.0.1:5000/acme/app: unauthorized: authentication required"},
			"Error response from daemon: reading manifest sha256:00 in 127.0.0.1:5000/acme/app: unauthorized: authentication required"},
		{errors.New("podman: exit status 1"), "Error response from daemon: podman: exit status 1"},
	} {
		if got := pullStatusMsg(ref, tc.err); got != tc.want {
			t.Errorf("%v:\n got %q\nwant %q", tc.err, got, tc.want)
		}
	}
}

func TestLoginCredentials(t *testing.T) {
	s := "-u ci -p tok 127.0.0.1:5000"
	if c := loginCredentials(&s); c == nil || c.User != "ci" || c.Token != "tok" || c.Registry != "127.0.0.1:5000" {
		t.Fatalf("%+v", c)
	}
	bad := "-u ci"
	if loginCredentials(&bad) != nil || loginCredentials(nil) != nil {
		t.Fatal("a malformed or missing login gave credentials")
	}
}
