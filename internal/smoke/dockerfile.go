package smoke

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
)

type instruction struct{ op, args string }

// dockerInstructions splits a Dockerfile into instructions, joining
// continuation lines and dropping comments. It never fails: a line it
// cannot read is an instruction with odd arguments, ignored later.
func dockerInstructions(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		op, args, _ := strings.Cut(line, " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return out
}

// stage is one FROM … [AS name] section of a Dockerfile.
type stage struct {
	name, base string
	ins        []instruction
}

// image is what the served stage declares, after inheriting from the
// stages it is built FROM.
type image struct {
	entry, cmd, health string
	ports              []int
	env                []string // names the image sets itself: defaults, not inputs
	copies             []string // COPY/ADD sources from the build context
}

// stages splits instructions at FROM.
func stages(ins []instruction) []stage {
	var out []stage
	for _, in := range ins {
		if in.op == "FROM" {
			f := strings.Fields(in.args)
			var s stage
			for i := 0; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					s.name = strings.ToLower(f[i+1])
					i++
				case s.base == "":
					s.base = strings.ToLower(f[i])
				}
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			out = append(out, stage{}) // ARG before FROM, or no FROM at all
		}
		out[len(out)-1].ins = append(out[len(out)-1].ins, in)
	}
	return out
}

// servedImage reads the stage that is served: target (compose
// build.target) when given and present, else the last stage, which is
// what a plain build produces. A later stage's instructions never leak
// into an earlier one's.
func servedImage(text, target string) image {
	st := stages(dockerInstructions(text))
	if len(st) == 0 {
		return image{}
	}
	idx := len(st) - 1
	if target != "" {
		for i, s := range st {
			if s.name == strings.ToLower(target) {
				idx = i
			}
		}
	}
	// The chain of stages this one is built FROM, oldest first.
	chain := []int{idx}
	for seen := map[int]bool{idx: true}; ; {
		base, found := st[chain[0]].base, -1
		for i := chain[0] - 1; i >= 0; i-- {
			if st[i].name != "" && st[i].name == base {
				found = i
				break
			}
		}
		if found < 0 || seen[found] {
			break
		}
		seen[found] = true
		chain = append([]int{found}, chain...)
	}
	var img image
	for _, i := range chain {
		for _, in := range st[i].ins {
			img.apply(in)
		}
	}
	return img
}

func (img *image) apply(in instruction) {
	switch in.op {
	case "ENTRYPOINT":
		img.entry = shellForm(in.args)
		img.cmd = "" // as docker does: a new ENTRYPOINT resets CMD
	case "CMD":
		img.cmd = shellForm(in.args)
	case "EXPOSE":
		for _, f := range strings.Fields(in.args) {
			if n, err := strconv.Atoi(strings.Split(f, "/")[0]); err == nil && n > 0 && n < 65536 {
				img.ports = append(img.ports, n)
			}
		}
	case "ENV":
		img.env = append(img.env, envNames(in.args)...)
	case "HEALTHCHECK":
		up := strings.ToUpper(in.args)
		if strings.TrimSpace(up) == "NONE" {
			img.health = ""
		} else if i := strings.Index(up, "CMD"); i >= 0 {
			img.health = strings.TrimSpace(in.args[i+3:])
		}
	case "COPY", "ADD":
		if strings.Contains(in.args, "--from") {
			return // from another stage or image, not the build context
		}
		var srcs []string
		if json.Unmarshal([]byte(in.args), &srcs) != nil {
			srcs = nil
			for _, f := range strings.Fields(in.args) {
				if !strings.HasPrefix(f, "--") {
					srcs = append(srcs, f)
				}
			}
		}
		if len(srcs) >= 2 {
			img.copies = append(img.copies, srcs[:len(srcs)-1]...)
		}
	}
}

// shellForm turns exec form ["a","b"] into a shell command line.
func shellForm(args string) string {
	var list []string
	if json.Unmarshal([]byte(args), &list) == nil {
		for i, a := range list {
			if a == "" || strings.ContainsAny(a, " \t'\"$;&|<>()*?") {
				list[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
			}
		}
		return strings.Join(list, " ")
	}
	return args
}

// envNames reads names from ENV a=1 b=2 or ENV a 1 (or a bare ENV).
func envNames(args string) []string {
	f := strings.Fields(args)
	if len(f) == 0 {
		return nil
	}
	if !strings.Contains(f[0], "=") {
		return []string{f[0]}
	}
	var out []string
	for _, x := range f {
		if k, _, ok := strings.Cut(x, "="); ok && isName(k) {
			out = append(out, k)
		}
	}
	return out
}

// isName reports whether s is an environment variable name.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// healthURL extracts the URL a health check command probes: an http(s)
// URL, or a curl/wget host:port/path without a scheme. A bind address
// (0.0.0.0, ::) is not a place to connect to: it becomes localhost.
func healthURL(cmd string) string {
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ", ",", " ", `"`, " ", "'", " ").Replace(cmd))
	probe := false
	for _, f := range fields {
		base := f[strings.LastIndex(f, "/")+1:]
		if base == "curl" || base == "wget" {
			probe = true
			continue
		}
		switch {
		case strings.HasPrefix(f, "http://") || strings.HasPrefix(f, "https://"):
			return connectable(f)
		case probe && !strings.HasPrefix(f, "-") && looksHostPort(f):
			return connectable("http://" + f)
		}
	}
	return ""
}

func looksHostPort(f string) bool {
	hostport, _, _ := strings.Cut(f, "/")
	h, p, ok := strings.Cut(hostport, ":")
	if !ok || h == "" {
		return false
	}
	_, err := strconv.Atoi(p)
	return err == nil
}

func connectable(u string) string {
	for _, bind := range []string{"0.0.0.0", "[::]"} {
		u = strings.Replace(u, "//"+bind+":", "//localhost:", 1)
		u = strings.Replace(u, "//"+bind+"/", "//localhost/", 1)
	}
	return u
}
