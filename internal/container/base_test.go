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

func TestBaseImages(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(`# syntax=docker/dockerfile:1
ARG BASE=python:3.12
FROM --platform=linux/amd64 docker.io/library/golang:1.26 AS build
RUN go build ./...
from ${BASE}
FROM build AS test
FROM scratch
FROM docker.io/library/busybox:1.36.1
COPY --from=build /out /out
FROM docker.io/library/busybox:1.36.1 AS again
`), 0o644)
	refs, err := container.BaseImages(dir, "Containerfile")
	if want := "docker.io/library/golang:1.26 docker.io/library/busybox:1.36.1"; err != nil || strings.Join(refs, " ") != want {
		t.Fatalf("BaseImages = %q, %v; want %s", refs, err, want)
	}
}

// A base image the engine has is left alone, a missing one is pulled as a
// plain build would, and one that cannot be pulled is a MissingImageError
// naming the exact pull to run — with a fake engine, so that this runs
// everywhere; TestBaseImagePulledByPodman does it with the real one.
func TestEnsureBaseImages(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Containerfile"), []byte("FROM local/have:1\nFROM reg.example/get:2\n"), 0o644)
	bin, argv := fakeEngine(t, "podman", `case "$1 $2 $3" in
"info  ") exit 0;;
"image exists local/have:1") exit 0;;
"image exists "*) exit 1;;
"pull reg.example/get:2 ") [ -n "$OFFLINE" ] && { echo "Error: initializing source docker://reg.example/get:2: dial tcp: lookup reg.example: no such host" >&2; exit 125; }; exit 0;;
esac
exit 2`)
	t.Setenv("PATH", bin)
	eng, err := container.Detect(ctx, "podman")
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureBaseImages(ctx, dir, "Containerfile", nil); err != nil {
		t.Fatalf("online: %v", err)
	}
	if b, _ := os.ReadFile(argv); !strings.Contains(string(b), "pull\nreg.example/get:2\n") || strings.Contains(string(b), "pull\nlocal/have:1") {
		t.Fatalf("pulled what it had, or not what it lacked:\n%s", b)
	}
	t.Setenv("OFFLINE", "1")
	err = eng.EnsureBaseImages(ctx, dir, "Containerfile", nil)
	var mi *container.MissingImageError
	if !errors.As(err, &mi) || mi.Ref != "reg.example/get:2" || mi.PullCommand() != "podman pull reg.example/get:2" || !strings.Contains(mi.Output, "no such host") {
		t.Fatalf("offline: %v (%#v)", err, mi)
	}
}
