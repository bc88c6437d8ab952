package cli

import (
	"bufio"
	"context"
	"fmt"
	"strings"
)

// askYes asks question on stderr and reads the answer from stdin: y or yes
// (any case) is a yes. A blocking read cannot watch a context, so it runs
// on a goroutine of its own and the prompt waits for either it or ctx: a
// Ctrl-C at the prompt ends it at once (ctx's error) instead of waiting
// for Enter, and whatever is typed afterwards is never read as an answer.
// The read is left blocked; only a process that is ending abandons one.
func askYes(ctx context.Context, io *IOStreams, question string) (bool, error) {
	fmt.Fprintf(io.ErrOut, "vastrun: %s [y/N] ", question) //nolint:errcheck // stderr is for people: a refused write cannot be reported
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(io.In).ReadString('\n')
		answer <- strings.TrimSpace(line)
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(io.ErrOut) //nolint:errcheck // ends the prompt's line (the terminal echoed ^C on it); for people
		return false, ctx.Err()
	case a := <-answer:
		return strings.EqualFold(a, "y") || strings.EqualFold(a, "yes"), nil
	}
}
