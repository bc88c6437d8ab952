package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/report"
	"github.com/vastrun/vastrun/internal/runstate"
)

// LogsOptions are the inputs of `vastrun logs`.
type LogsOptions struct {
	IO         *IOStreams
	ConfigPath string
	StateDir   string
	RunID      string
	Follow     bool
	Clock      clock.Clock
	// Poll is how often -f looks for more output (default 1 s).
	Poll time.Duration
}

// NewCmdLogs builds `vastrun logs`; runF replaces the run in tests.
func NewCmdLogs(f *Factory, runF func(context.Context, *LogsOptions) error) *cobra.Command {
	opts := &LogsOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "logs [RUN]",
		Short: "Print a run's test or training log (default: the latest run); -f follows it live",
		Long: `Print the workload's output of a run (default: the latest): the gate and
canary smoke logs, the GPU test's log, or each training attempt's log, from
the evidence directory, redacted as written. While the run goes on, its
controller copies the output there as the instance writes it, so -f follows
it live until the run ends (or its controller is gone). Reads only.`,
		Example: "  vastrun logs\n  vastrun logs -f\n  vastrun logs mx1seio0a3dm",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.RunID = args[0]
			}
			opts.Clock = f.clock()
			return nil
		}, runF, runLogs),
	}
	// -f follows here, as tail -f does; the config is --file.
	cmd.Flags().StringVar(&opts.ConfigPath, "file", "vastrun.yaml", "config file for the state dir (optional)")
	cmd.Flags().StringVar(&opts.StateDir, "state-dir", "", "where run journals live")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing output as the run writes it, until it ends")
	return cmd
}

func runLogs(ctx context.Context, opts *LogsOptions) error {
	wo := &WorkflowOptions{ConfigPath: opts.ConfigPath, StateDir: opts.StateDir, allowMissingConfigs: true}
	cfg, err := wo.loadConfig()
	if err != nil {
		return err
	}
	dir, err := runDir(cfg.StateDir, opts.RunID)
	if err != nil {
		return err
	}
	evidence := report.EvidenceDir(dir)
	if evidence == "" {
		return fmt.Errorf("run %s: no evidence directory recorded in %s", filepath.Base(dir), filepath.Join(dir, "state.json"))
	}
	poll := opts.Poll
	if poll <= 0 {
		poll = time.Second
	}
	offsets := map[string]int64{}
	printed := 0
	for {
		for _, p := range report.LogFiles(evidence) {
			if _, seen := offsets[p]; !seen {
				offsets[p] = 0
				if printed > 0 || len(report.LogFiles(evidence)) > 1 {
					if _, err := fmt.Fprintf(opts.IO.Out, "==> %s <==\n", filepath.Base(p)); err != nil {
						return err
					}
				}
				printed++
			}
			n, err := copyFrom(opts.IO.Out, p, offsets[p])
			offsets[p] += n
			if err != nil {
				return err
			}
		}
		if !opts.Follow {
			if printed == 0 {
				opts.IO.Infof("run %s has no workload log yet in %s", filepath.Base(dir), evidence)
			}
			return nil
		}
		if done, why := runEnded(dir); done {
			// One more pass: what was written before the outcome.
			for p := range offsets {
				n, _ := copyFrom(opts.IO.Out, p, offsets[p])
				offsets[p] += n
			}
			opts.IO.Infof("%s", why)
			return nil
		}
		if err := clock.Sleep(ctx, opts.Clock, poll); err != nil {
			return nil // interrupted: following ends, the run goes on
		}
	}
}

// copyFrom copies path from off to w, complete lines only, and returns how
// many bytes it copied.
func copyFrom(w io.Writer, path string, off int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil // not there yet
	}
	defer func() { _ = f.Close() }() // only read
	b, err := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
	if err != nil {
		return 0, err
	}
	if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		return 0, nil
	}
	_, err = w.Write(b)
	return int64(len(b)), err
}

// runEnded reports whether a run's output is complete: its journal has an
// outcome, or no process drives it any more (a dead controller).
func runEnded(dir string) (bool, string) {
	st, err := runstate.LoadState(dir)
	if err == nil && st.Outcome != "" {
		return true, fmt.Sprintf("run %s ended: %s", st.RunID, st.Outcome)
	}
	if findLockHolder(filepath.Join(dir, journal.FileName)) == nil {
		return true, fmt.Sprintf("run %s has no outcome and no controller: 'vastrun resume' takes it over", filepath.Base(dir))
	}
	return false, ""
}
