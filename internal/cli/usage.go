package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vastrun/vastrun/internal/text"
)

// flagError turns cobra's flag errors into usage errors (exit 2) with a
// hint. For commands that run another program (exec, ssh), a flag vastrun
// does not know is most likely the program's own: say to put -- first.
func flagError(c *cobra.Command, err error) error {
	hint := fmt.Sprintf("see '%s --help'", c.CommandPath())
	var unknown *pflag.NotExistError // pflag's typed "unknown flag" error
	switch {
	case takesCommand(c) && errors.As(err, &unknown):
		hint = fmt.Sprintf("flags after the command belong to it: put -- before the command, e.g. '%s -- nvidia-smi -L'", c.CommandPath())
	case errors.As(err, &unknown) && unknown.GetSpecifiedName() != "":
		if s := text.Suggest(unknown.GetSpecifiedName(), flagNames(c), 2); len(s) > 0 {
			for i := range s {
				s[i] = "--" + s[i]
			}
			hint = fmt.Sprintf("did you mean %s? (see '%s --help')", text.OneOf(s), c.CommandPath())
		}
	}
	return &UsageError{Err: err, Hint: hint}
}

// flagNames are the long flags c takes, its inherited ones included.
func flagNames(c *cobra.Command) []string {
	var names []string
	add := func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	}
	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	return names
}

// takesCommand reports commands whose arguments are a command line to run.
func takesCommand(c *cobra.Command) bool {
	return c.Name() == "exec" || c.Name() == "ssh"
}

// usageForGroups makes a command that only groups others (sim, canary,
// agent) answer an unknown or missing subcommand as a usage error, exit 2,
// rather than printing help and succeeding.
func usageForGroups(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c == root || !c.HasSubCommands() || c.RunE != nil || c.Run != nil {
			return
		}
		c.SuggestionsMinimumDistance = 2
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &UsageError{Err: fmt.Errorf("%s needs a subcommand", cmd.CommandPath()), Hint: fmt.Sprintf("see '%s --help' for its subcommands", cmd.CommandPath())}
			}
			hint := fmt.Sprintf("see '%s --help' for its subcommands", cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf("did you mean '%s %s'?", cmd.CommandPath(), s[0])
			}
			return &UsageError{Err: fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()), Hint: hint}
		}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			return errors.New("unreachable: Args refuses every call")
		}
	}
	walk(root)
}
