package cli

import (
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/vastrun/vastrun/internal/publish/registrytest"
)

// cmdRegistry serves a real OCI registry on 127.0.0.1 for a script:
//
//	registry start                 sets $REGISTRY to its host:port, $REGISTRY_PORT to its port
//	registry start wrong-digest    one that answers a wrong digest for tags
//	registry start auth USER PASS  one that requires basic auth
//	registry sized REPO BYTES      push a manifest listing one layer of BYTES
//	                               (never uploaded); sets $IMAGE to it pinned
func cmdRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 2 && args[0] == "push" {
		registryPush(ts, args[1])
		return
	}
	if len(args) == 3 && args[0] == "sized" { // registry sized REPO BYTES: $IMAGE lists a layer of BYTES
		n, err := strconv.ParseInt(args[2], 10, 64)
		ts.Check(err)
		ref, err := registrytest.PushSized(ts.Getenv("REGISTRY"), args[1], n)
		ts.Check(err)
		ts.Setenv("IMAGE", ref)
		return
	}
	if len(args) < 1 || args[0] != "start" {
		ts.Fatalf("usage: registry start [wrong-digest | auth USER PASS] | registry push REPO:TAG | registry sized REPO BYTES")
	}
	var o registrytest.Options
	switch {
	case len(args) == 2 && args[1] == "wrong-digest":
		o.WrongDigest = "sha256:" + strings.Repeat("ab", 32)
	case len(args) == 4 && args[1] == "auth":
		o.User, o.Password = args[2], args[3]
	case len(args) != 1:
		ts.Fatalf("usage: registry start [wrong-digest | auth USER PASS]")
	}
	srv := registrytest.Start(o)
	ts.Defer(srv.Close)
	host := registrytest.Host(srv)
	ts.Setenv("REGISTRY", host)
	ts.Setenv("REGISTRY_PORT", host[strings.LastIndexByte(host, ':')+1:])
}

// cmdOCILayout builds an image in the test (no engine) and writes it as an
// OCI layout: ocilayout DIR FILE... (each FILE from the script's work dir
// lands in /app/ of the image).
func cmdOCILayout(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: ocilayout DIR [FILE...]")
	}
	files := map[string]string{}
	for _, f := range args[1:] {
		files["app/"+f] = ts.ReadFile(f)
	}
	img, err := registrytest.Image(files, "sh", "/app/smoke.sh")
	ts.Check(err)
	ts.Check(registrytest.WriteLayout(ts.MkAbs(args[0]), img))
}
