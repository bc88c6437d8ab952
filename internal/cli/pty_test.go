package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	"github.com/rogpeppe/go-internal/testscript"
)

// ptyEnv are the script variables a pty command sees (testscript has no
// way to list a script's environment); -env NAME adds one.
var ptyEnv = []string{"PATH", "HOME", "TMPDIR", "VAST_API_KEY", "VAST_URL", "GITHUB_ACTIONS", "GITLAB_CI", "CI", "NO_COLOR", "TERM"}

// cmdPty runs a program on a pseudo-terminal (its stdin, stdout and stderr),
// as a person at a terminal runs it. What it wrote, both streams as the
// terminal shows them, becomes the command's stdout; $PTY_EXIT holds its
// exit status:
//
//	pty [-answer PROMPT TEXT]... [-interrupt PROMPT] [-env NAME]... PROG ARGS...
//
// -answer types TEXT and a newline once PROMPT has appeared; -interrupt
// types Ctrl-C there instead (the terminal sends the program SIGINT) and
// nothing after it.
func cmdPty(ts *testscript.TestScript, neg bool, args []string) {
	type answer struct{ prompt, text string }
	const ctrlC = "\x03"
	var answers []answer
	names := append([]string(nil), ptyEnv...)
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch {
		case args[0] == "-answer" && len(args) >= 3:
			answers = append(answers, answer{args[1], args[2] + "\n"})
			args = args[3:]
		case args[0] == "-interrupt" && len(args) >= 2:
			answers = append(answers, answer{args[1], ctrlC})
			args = args[2:]
		case args[0] == "-env" && len(args) >= 2:
			names = append(names, args[1])
			args = args[2:]
		default:
			ts.Fatalf("usage: pty [-answer PROMPT TEXT]... [-interrupt PROMPT] [-env NAME]... PROG ARGS...")
		}
	}
	if len(args) == 0 {
		ts.Fatalf("usage: pty [-answer PROMPT TEXT]... [-interrupt PROMPT] [-env NAME]... PROG ARGS...")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = ts.Getenv("WORK")
	for _, n := range names {
		if v := ts.Getenv(n); v != "" {
			cmd.Env = append(cmd.Env, n+"="+v)
		}
	}
	if ts.Getenv("TERM") == "" {
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
	}
	// The program resolves on the script's PATH, where testscript put vastrun.
	if lp, err := lookPathIn(args[0], ts.Getenv("PATH")); err == nil {
		cmd.Path = lp
	}
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	ts.Check(err)
	var mu sync.Mutex
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return // EIO once the program and its children closed the terminal
			}
		}
	}()
	// Answer prompts as they appear; a prompt that never comes is the
	// script's failure to find, not a wait that decides the test.
	go func() {
		for _, a := range answers {
			for {
				mu.Lock()
				seen := strings.Contains(out.String(), a.prompt)
				mu.Unlock()
				if seen {
					master.Write([]byte(a.text))
					break
				}
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
	werr := cmd.Wait()
	<-done
	master.Close()
	code := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
	} else if werr != nil {
		ts.Fatalf("pty %s: %v", args[0], werr)
	}
	ts.Setenv("PTY_EXIT", strconv.Itoa(code))
	mu.Lock()
	ts.Stdout().Write(out.Bytes())
	mu.Unlock()
	if (code != 0) != neg {
		ts.Fatalf("pty %s: exit status %d", strings.Join(args, " "), code)
	}
}

func lookPathIn(name, path string) (string, error) {
	for _, dir := range strings.Split(path, ":") {
		p := dir + "/" + name
		if fi, err := statFile(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

var statFile = os.Stat
