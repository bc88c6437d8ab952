package cli

import (
	"encoding/json"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rogpeppe/go-internal/testscript"
)

// registryPush writes a random image to $REGISTRY as REPO:TAG and sets
// $DIGEST: registry push REPO:TAG (the registry from 'registry start').
func registryPush(ts *testscript.TestScript, ref string) {
	img, err := random.Image(1024, 1)
	ts.Check(err)
	r, err := name.ParseReference(ts.Getenv("REGISTRY")+"/"+ref, name.Insecure)
	ts.Check(err)
	ts.Check(remote.Write(r, img))
	d, err := img.Digest()
	ts.Check(err)
	ts.Setenv("DIGEST", d.String())
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
