package cli

import (
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rogpeppe/go-internal/testscript"
)

// cmdRegistry serves an OCI registry on loopback for a script:
//
//	registry start                  serve one; sets $REGISTRY (host:port)
//	registry push REPO:TAG          push a random image; sets $DIGEST
func cmdRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: registry start | registry push REPO:TAG")
	}
	switch args[0] {
	case "start":
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		ts.Defer(srv.Close)
		ts.Setenv("REGISTRY", strings.TrimPrefix(srv.URL, "http://"))
	case "push":
		img, err := random.Image(1024, 1)
		ts.Check(err)
		ref, err := name.ParseReference(ts.Getenv("REGISTRY")+"/"+args[1], name.Insecure)
		ts.Check(err)
		ts.Check(remote.Write(ref, img))
		d, err := img.Digest()
		ts.Check(err)
		ts.Setenv("DIGEST", d.String())
	default:
		ts.Fatalf("unknown registry subcommand %q", args[0])
	}
}

// cmdSimReady waits for `vastrun sim serve --ready-file FILE` and sets
// VAST_URL and VAST_API_KEY from it:
//
//	simready FILE
func cmdSimReady(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: simready FILE")
	}
	var info struct {
		URL    string `json:"url"`
		APIKey string `json:"api_key"`
	}
	waitFor(ts, func() bool {
		b, err := os.ReadFile(ts.MkAbs(args[0]))
		return err == nil && json.Unmarshal(b, &info) == nil && info.URL != ""
	}, "the simulator's ready file "+args[0])
	ts.Setenv("VAST_URL", info.URL)
	ts.Setenv("VAST_API_KEY", info.APIKey)
}
