package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// imageSizeEnv overrides how a run learns its image's compressed size
// (docs/config.md, timeouts): "off" never asks, "registry" reads the image's
// registry manifest whatever API the run talks to, a number is the size in
// bytes.
const imageSizeEnv = "VASTRUN_IMAGE_SIZE"

// imageSizer is how a run learns its image's compressed size, for ready
// deadlines that count each host's pull: from the image's registry
// manifest when the run talks to Vast itself, from the simulator under
// --sim, and not at all against another API (a simulator served apart, a
// test double: its images are the test's names, not a registry's), unless
// VASTRUN_IMAGE_SIZE says otherwise. nil: not learned.
func (f *Factory) imageSizer(cfg *config.Config) func(context.Context, string) (int64, error) {
	v := strings.TrimSpace(f.Getenv(imageSizeEnv))
	switch {
	case v == "off":
		return nil
	case v != "" && v != "registry":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			err = fmt.Errorf("%s=%q is not off, registry or a size in bytes", imageSizeEnv, v)
		}
		return func(context.Context, string) (int64, error) { return n, err }
	case v == "" && f.simSrv != nil:
		s := f.simSrv
		return func(_ context.Context, ref string) (int64, error) { return s.ImageSize(ref), nil }
	case v == "" && !isVastAPI(f.apiURL):
		return nil
	}
	o := image.Options{}
	if l := cfg.ImageLogin; l.IsSet() {
		o.Login = &image.Login{Registry: l.Registry, User: f.Getenv(l.UserEnv), Token: f.Getenv(l.TokenEnv)}
	}
	return func(ctx context.Context, ref string) (int64, error) { return image.CompressedSize(ctx, ref, o) }
}

// isVastAPI says whether base is Vast's own API host.
func isVastAPI(base string) bool {
	u, err := url.Parse(base)
	d, _ := url.Parse(vast.DefaultBaseURL)
	return err == nil && u.Host == d.Host
}
