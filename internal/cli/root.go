// Package cli is vastrun's command line: the only package that imports
// cobra. Each command is an Options struct, a NewCmdX(f, runF) that fills it
// from flags and arguments, and a runX(ctx, opts) that does the work through
// the Factory; its RunE is runCmd's, which hands the options to runF (tests)
// or runX. TestEveryCommandHasTheGhShape holds every command to that.
// Decisions that are not wiring live in packages of their own (janitor,
// runs, sweep, team), where they are table-tested.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Main runs vastrun with the process's signals wired to cancellation (a
// second Ctrl-C leaves at once: interrupt.go) and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	home, _ := os.UserHomeDir()
	f := &Factory{IO: NewIOStreams(stdin, stdout, stderr), Getenv: os.Getenv, HomeDir: home}
	defer f.watchSignals(cancel, os.Exit)()
	return Run(ctx, f, args)
}

// Run executes one command line with the given factory. Tests call it
// directly; it never calls os.Exit.
func Run(ctx context.Context, f *Factory, args []string) int {
	err := execute(ctx, f, args)
	if err == nil {
		return ExitOK
	}
	reportError(f, err)
	return exitCode(err)
}

// execute runs one command line and returns its error, unprinted.
func execute(ctx context.Context, f *Factory, args []string) error {
	signalled := ctx                         // cancelled by a signal (Main), as opposed to by the command itself
	ctx, f.stopRun = context.WithCancel(ctx) // a lost team lease stops the command (team.go)
	defer f.stopRun()
	defer f.Close()
	root := NewRootCmd(f)
	root.SetArgs(args)
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return nil
	}
	switch {
	case signalled.Err() != nil:
		err = asInterrupted(err) // never "context canceled" (interrupt.go)
	case ctx.Err() != nil && !errors.Is(err, context.Canceled):
		// The command stopped itself (a lost team lease): it exits as
		// interrupted, in its own words.
		err = &interruptedError{msg: err.Error(), err: errors.Join(context.Canceled, err)}
	}
	return err
}

// reportError tells a person what failed and how to fix it: the error,
// then one "hint:" line a fix (exitcodes.go decides both by type).
func reportError(f *Factory, err error) {
	f.IO.Infof("%s", err)
	for _, h := range hints(err) {
		f.IO.Hintf("%s", h)
	}
}

// NewRootCmd builds the command tree.
func NewRootCmd(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "vastrun",
		Short: "Disposable GPU rentals on Vast.ai that are always found, destroyed and evidenced",
		Long: `vastrun rents disposable GPU machines on the Vast.ai marketplace and guarantees,
for every rental, that it is found again, destroyed with the destruction
confirmed, and that it leaves evidence.

Authentication: VAST_API_KEY, or the official CLI's key file
(~/.config/vastai/vast_api_key, legacy ~/.vast_api_key). With --sim, vastrun
runs against an embedded simulator instead: nothing is rented or billed.

Exit codes are documented in docs/exit-codes.md.`,
		Example: `  # A whole GPU acceptance step, offline against the embedded simulator
  vastrun ci --sim --yes -f examples/ci.yaml

  # The same for real: rent, verify, test, destroy (confirmed), evidence
  VAST_API_KEY=... vastrun ci --yes -f vastrun.yaml

  # Browse offers offline
  vastrun offers --sim 'gpu_name=RTX_4090 num_gpus=1'

  # The same search against the real marketplace, cheapest first, as JSON
  VAST_API_KEY=... vastrun offers 'gpu_name=RTX_4090 num_gpus=1' -o dph_total --json

  # Run the simulator as a server for other tools (the official CLI included)
  vastrun sim serve --listen 127.0.0.1:8080`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// SuggestionsFor reads this directly (0 would suggest nothing).
		SuggestionsMinimumDistance: 2,
		// Runnable, so that an unknown command is a usage error (exit 2)
		// like an unknown flag, with cobra's suggestions as the hint.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if v, _ := cmd.Flags().GetBool("version"); v && len(args) == 0 {
				return runVersion(cmd.Context(), &VersionOptions{IO: f.IO, JSON: f.JSON})
			}
			if len(args) == 0 {
				return cmd.Help()
			}
			hint := fmt.Sprintf("see '%s --help' for the commands", cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf("did you mean '%s %s'?", cmd.CommandPath(), s[0])
			}
			return &UsageError{Err: fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()), Hint: hint}
		},
	}
	pf := root.PersistentFlags()
	pf.BoolVar(&f.JSON, "json", false, "print machine-readable JSON on stdout (a versioned contract)")
	pf.BoolVarP(&f.Quiet, "quiet", "q", false, "show no progress, only warnings, errors and the result")
	pf.BoolVar(&f.Debug, "debug", false, "log API calls and decisions to stderr (for developers)")
	pf.BoolVar(&f.Sim, "sim", false, "run against an embedded marketplace simulator (nothing real is rented)")
	pf.StringArrayVar(&f.SimFaults, "sim-fault", nil, "with --sim: inject a simulator fault (JSON, repeatable), e.g. '{\"kind\":\"preempt_after\",\"seconds\":60}'")
	pf.StringVar(&f.URL, "url", "", "Vast API base URL (default $VAST_URL or https://console.vast.ai)")
	pf.StringVar(&f.APIKey, "api-key", "", "Vast API key (prefer $VAST_API_KEY: flags are visible in the process list)")
	root.SetFlagErrorFunc(flagError)
	// No command defines its own persistent pre-run: this one runs first
	// for every command.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if len(f.SimFaults) > 0 && !f.Sim {
			return &UsageError{Err: errors.New("--sim-fault needs --sim: faults are injected into the embedded simulator, and without --sim this command would run against the real API with none"),
				Hint: "add --sim, or drop --sim-fault (a 'vastrun sim serve' simulator takes faults on POST /_sim/faults)"}
		}
		return nil
	}
	showVersion := root.Flags().Bool("version", false, "print the vastrun version (as 'vastrun version')")

	root.AddCommand(NewCmdVersion(f, nil), NewCmdOffers(f, nil), NewCmdSim(f),
		NewCmdCI(f, nil), NewCmdUp(f, nil), NewCmdExec(f, nil), NewCmdDown(f, nil), NewCmdStatus(f, nil), NewCmdReap(f, nil), NewCmdDoctor(f, nil),
		NewCmdTrain(f, nil), NewCmdResume(f, nil), NewCmdAgent(f), NewCmdCanary(f, nil), NewCmdReport(f, nil),
		NewCmdSSH(f, nil), NewCmdValidate(f, nil), NewCmdPublish(f, nil), NewCmdRuns(f, nil), NewCmdBudget(f, nil), NewCmdSweep(f, nil),
		NewCmdInit(f, nil), NewCmdLogs(f, nil), NewCmdPlan(f, nil), NewCmdApply(f, nil), NewCmdMCP(f, nil))
	root.AddCommand(NewCmdCheckpoint(f)) // hidden developer tool
	usageForGroups(root)
	guardSimSplit(root, f)
	_ = showVersion
	return root
}

// usageArgs wraps cobra's argument validators so that errors are UsageErrors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return &UsageError{Err: err, Hint: fmt.Sprintf("see '%s --help'", cmd.CommandPath())}
		}
		return nil
	}
}
