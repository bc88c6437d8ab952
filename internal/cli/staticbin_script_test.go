package cli

import (
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdStaticVastrun builds this tree's vastrun as the release does
// (CGO_ENABLED=0, -trimpath: a static linux/amd64 executable) into
// $WORK/vastrun-static and sets the variable it is given to its path: the
// scenarios whose simulated instances run inside an image hand it to them
// as VASTRUN_AGENT_BINARY, since the test binary is built with cgo and no
// image without glibc runs it (as on Vast).
func cmdStaticVastrun(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: staticvastrun VAR")
	}
	root, err := filepath.Abs("../..") // the test runs in internal/cli
	ts.Check(err)
	out := ts.MkAbs("vastrun-static")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/vastrun")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		ts.Fatalf("go build: %v\n%s", err, b)
	}
	ts.Setenv(args[0], out)
}
