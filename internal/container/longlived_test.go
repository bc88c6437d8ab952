package container_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/container"
)

func TestLoopbackRegistry(t *testing.T) {
	for ref, want := range map[string]bool{
		"127.0.0.1:5000/acme/app@sha256:ab": true, "localhost/app:1": true, "localhost:5000/app": true, "[::1]:5000/app": true,
		"ghcr.io/acme/app:1": false, "10.0.0.1:5000/app": false, "app:1": false, "docker.io/library/busybox": false,
	} {
		if got := container.LoopbackRegistry(ref); got != want {
			t.Errorf("%s: %v, want %v", ref, got, want)
		}
	}
}

// The pull's credentials go through an auth file the engine reads, never
// argv; the engine's last "Error:" line is the reason.
func TestPullKeepsCredentialsOutOfArgv(t *testing.T) {
	dir, argv := fakeEngine(t, "podman", `for a; do case "$prev" in --authfile) cat "$a" >> `+"\"$(dirname \"$0\")/auth\""+`;; esac; prev=$a; done
echo 'time="x" level=warning msg="Failed, retrying"' >&2
echo 'Error: initializing source docker://127.0.0.1:5000/a@sha256:00: reading manifest sha256:00 in 127.0.0.1:5000/a: manifest unknown' >&2; exit 125`)
	eng := &container.Engine{Name: "podman", Path: filepath.Join(dir, "podman")}
	err := eng.Pull(context.Background(), "127.0.0.1:5000/a@sha256:00", &container.Credentials{Registry: "127.0.0.1:5000", User: "ci", Token: "tok-9f8e7d6c"})
	var pe *container.PullError
	if !errors.As(err, &pe) || !pe.ManifestUnknown || !strings.HasPrefix(pe.Reason, "initializing source docker://") {
		t.Fatalf("Pull: %#v", err)
	}
	b, _ := os.ReadFile(argv)
	if strings.Contains(string(b), "tok-9f8e7d6c") || !strings.Contains(string(b), "--tls-verify=false") {
		t.Fatalf("argv:\n%s", b)
	}
	if auth, _ := os.ReadFile(filepath.Join(dir, "auth")); !strings.Contains(string(auth), `"password":"tok-9f8e7d6c"`) {
		t.Fatalf("auth file: %q", auth)
	}
}

// An exec's environment reaches the engine on an inherited pipe (fd 3),
// never in argv.
func TestExecCommandPassesEnvOnAPipe(t *testing.T) {
	dir, argv := fakeEngine(t, "podman", `cat /dev/fd/3`)
	eng := &container.Engine{Name: "podman", Path: filepath.Join(dir, "podman")}
	cmd, done, err := eng.ExecCommand(container.Exec{Container: "c1", Dir: "/w", TTY: true, Env: map[string]string{"SECRET_TOKEN": "tok-9f8e7d6c", "A": "1"}, Argv: []string{"sh", "-c", "true"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	done()
	if err != nil || string(out) != "A=1\nSECRET_TOKEN=tok-9f8e7d6c\n" {
		t.Fatalf("env file: %v %q", err, out)
	}
	b, _ := os.ReadFile(argv)
	want := "exec\n-i\n-t\n-w\n/w\n--env-file\n/dev/fd/3\nc1\nsh\n-c\ntrue\nenv:\n"
	if string(b) != want {
		t.Fatalf("argv:\n%s\nwant\n%s", b, want)
	}
	if _, _, err := (&container.Engine{Name: "docker"}).ExecCommand(container.Exec{}); !errors.Is(err, container.ErrNotPodman) {
		t.Fatalf("docker: %v", err)
	}
}
