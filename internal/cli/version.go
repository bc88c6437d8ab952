package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/vastrun/vastrun/internal/cli.Version=v1.2.3".
var Version = "dev"

// VersionOptions are the inputs of `vastrun version`.
type VersionOptions struct {
	IO   *IOStreams
	JSON bool
}

// NewCmdVersion builds `vastrun version`; runF replaces the run in tests.
func NewCmdVersion(f *Factory, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{IO: f.IO}
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the vastrun version",
		Example: "  vastrun version\n  vastrun version --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.JSON = f.JSON
			if runF != nil {
				return runF(opts)
			}
			return runVersion(opts)
		},
	}
}

type versionInfo struct {
	Schema    string `json:"schema"`
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func runVersion(opts *VersionOptions) error {
	v := versionInfo{Schema: "vastrun.version/v1", Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
		if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintf(opts.IO.Out, "vastrun %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
	return nil
}
