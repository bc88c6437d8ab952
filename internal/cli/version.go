package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version, Commit and Date are stamped at build time by the release
// (.goreleaser.yaml) with -ldflags "-X github.com/vastrun/vastrun/internal/cli.Version=1.2.3 ...".
// A plain go build or go install leaves them empty and vastrun falls back
// to the module version and VCS stamp the Go toolchain records.
var (
	Version = "dev"
	Commit  = ""
	Date    = ""
)

// VersionOptions are the inputs of `vastrun version`.
type VersionOptions struct {
	IO   *IOStreams
	JSON bool
}

// NewCmdVersion builds `vastrun version`; runF replaces the run in tests.
func NewCmdVersion(f *Factory, runF func(context.Context, *VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{IO: f.IO}
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the vastrun version",
		Example: "  vastrun version\n  vastrun version --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(*cobra.Command, []string) error {
			opts.JSON = f.JSON
			return nil
		}, runF, runVersion),
	}
}

type versionInfo struct {
	Schema    string `json:"schema"`
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Date      string `json:"date,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func runVersion(_ context.Context, opts *VersionOptions) error {
	v := versionInfo{Schema: "vastrun.version/v1", Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && v.Commit == "":
				v.Commit = s.Value
			case s.Key == "vcs.time" && v.Date == "":
				v.Date = s.Value
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
	extra := ""
	if v.Commit != "" {
		extra += ", commit " + v.Commit
	}
	if v.Date != "" {
		extra += ", built " + v.Date
	}
	_, err := fmt.Fprintf(opts.IO.Out, "vastrun %s (%s, %s%s)\n", v.Version, v.GoVersion, v.Platform, extra)
	return err
}
