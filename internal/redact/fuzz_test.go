package redact

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/vastrun/vastrun/internal/redact/redacttest"
)

// FuzzRedact feeds random secrets (any bytes: newlines, quotes,
// backslashes, unicode, NUL) in every form a program prints a value in —
// through encoders written here, apart from the masking code, and real
// bash and coreutils base64 — at random alignments (prefix), wrapped at
// random widths, through every masking path (Bytes, the Writer and two
// interleaved Streams in random writes, JSON). leak (forms_test.go) says
// what may never show.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{multiLine, jsonish, "plainsecret123", "a\x00b\x00c\x00d\x00", "ünïcødé-sëcret-☃", `'\''"\"$(x)` + "`", "\r\n\r\nlines\r\nwith\r\nCRLF!", `q8Zr/Kd+ "é'☃\x`} {
		f.Add(s, "pre ", 7, uint8(76))
	}
	f.Fuzz(func(t *testing.T, secret, prefix string, cut int, width uint8) {
		if len(secret) < MinSecretLen || len(secret) > 512 || len(prefix) > 64 || Unmaskable(secret) {
			return // the preflight refuses these; long ones only slow the fuzzer
		}
		if lines := strings.FieldsFunc(secret, func(r rune) bool { return r == '\n' || r == '\r' }); len(lines) > 1 {
			// A multi-line secret is masked line by line where its lines are
			// long enough; the rest of its checks need one line.
			for _, l := range lines {
				if len(strings.TrimSpace(l)) < MinSecretLen {
					return
				}
			}
		}
		for i := 0; i+3 <= len(secret); i++ {
			if strings.Contains(prefix, secret[i:i+3]) {
				// A piece of the secret in the text around it encodes like
				// the secret's own bytes: the leak check would take it for
				// the secret's.
				return
			}
		}
		r := New(secret)
		rng := rand.New(rand.NewPCG(uint64(cut), uint64(width)))
		w := 1 + int(width)%80
		artifacts := fuzzArtifacts(secret, prefix, w)
		// Real bash's printf %q, when the value can live in an environment.
		if !strings.Contains(secret, "\x00") {
			artifacts["bash printf %q"] = bashQuote(t, secret)
		}
		check := redacttest.NewLeak(secret, testTextForms(secret))
		for name, a := range artifacts {
			for how, out := range maskedEveryWay(r, a, rng) {
				if bad := check.Find(out); bad != "" {
					t.Fatalf("%s via %s: %s shows\nartifact %q\nmasked   %q", name, how, bad, a, out)
				}
			}
		}
		// A JSON document stays a document, and its decoded strings are clean.
		doc, _ := json.Marshal(map[string]any{"result": prefix + secret, secret: []any{secret, 1}})
		masked := r.JSON(doc)
		var back any
		if json.Unmarshal(masked, &back) == nil {
			b, _ := json.Marshal(back)
			var all []string
			collect(back, &all)
			for _, s := range all {
				if strings.Contains(s, secret) {
					t.Fatalf("decoded JSON still holds the secret: %s", b)
				}
			}
		} else if bytes.Contains(masked, []byte(secret)) {
			t.Fatalf("JSON fallback leaked: %s", masked)
		}
	})
}

// bash is one bash process per fuzzing process, quoting values with its
// printf %q: starting a process per input would make the fuzzer wait on
// process start-up rather than fuzz.
var bash struct {
	sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

// bashQuote is bash's printf '%q' of s (a value without NUL).
func bashQuote(t *testing.T, s string) string {
	bash.Lock()
	defer bash.Unlock()
	if bash.in == nil {
		cmd := exec.Command("bash", "-c", `while IFS= read -r line; do printf -v S '%b' "$line"; printf '%q\n' "$S"; done`)
		cmd.Env = []string{"LANG=C.UTF-8"}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("bash: %v", err)
		}
		bash.in, bash.out = in, bufio.NewReader(out)
	}
	var line strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&line, `\x%02x`, c)
	}
	if _, err := io.WriteString(bash.in, line.String()+"\n"); err != nil {
		t.Fatalf("bash: %v", err)
	}
	q, err := bash.out.ReadString('\n')
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	return q
}

// fuzzArtifacts prints s (after prefix) in every form, through encoders
// written here: what masking must catch.
func fuzzArtifacts(s, prefix string, width int) map[string]string {
	b := []byte(prefix + s + "!")
	j, _ := json.Marshal(prefix + s)
	var noHTML bytes.Buffer
	enc := json.NewEncoder(&noHTML)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	line, _ := json.Marshal(map[string]any{"step": 1, "note": prefix + s})
	a := map[string]string{
		"raw":             prefix + s + "\n",
		"json":            `{"v": ` + string(j) + "}",
		"json no html":    noHTML.String(),
		"json ascii":      `"` + testPyJSON(s) + `"`,
		"query":           "?k=" + url.QueryEscape(s),
		"path":            "/" + url.PathEscape(s),
		"quote":           testPercent(s, "/_.-~", false),
		"quote safe=''":   testPercent(s, "_.-~", false),
		"quote_plus":      testPercent(s, "_.-~", true),
		"encodeURI...":    testPercent(s, "-_.!~*'()", false),
		"form":            "k=" + testPercent(s, "*-._", true) + "&z=1",
		"shell":           "'" + strings.ReplaceAll(s, "'", `'\''`) + "'",
		"shlex":           "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'",
		"html":            html.EscapeString(s),
		"html python":     strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#x27;").Replace(s),
		"base64":          base64.StdEncoding.EncodeToString(b),
		"base64url":       base64.RawURLEncoding.EncodeToString(b),
		"base64 wrapped":  wrap(base64.StdEncoding.EncodeToString(b), width),
		"base64 of JSON":  wrap(base64.StdEncoding.EncodeToString(append(line, '\n')), width),
		"hex":             hex.EncodeToString(b),
		"HEX":             strings.ToUpper(hex.EncodeToString(b)),
		"hex wrapped":     wrap(hex.EncodeToString(b), width),
		"hex spaced (od)": testOD(b),
		"xxd":             testXXD(b),
	}
	return a
}

func wrap(s string, width int) string {
	var b strings.Builder
	for i := 0; i < len(s); i += width {
		b.WriteString(s[i:min(i+width, len(s))] + "\n")
	}
	return b.String()
}

// testPercent is percent-encoding keeping letters, digits and safe.
func testPercent(s, safe string, plus bool) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(safe, rune(c))):
			b.WriteByte(c)
		case c == ' ' && plus:
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// testPyJSON is s inside a JSON string as Python's json.dumps writes it
// (a byte that is not UTF-8 read from the environment as \udcXX).
func testPyJSON(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\udc%02x`, s[i])
			i++
			continue
		}
		i += size
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// testTextForms are the text forms leak checks, from the encoders here;
// the first is Python's JSON escape (leak's convention).
func testTextForms(s string) []string {
	j, _ := json.Marshal(s)
	return []string{testPyJSON(s), string(j[1 : len(j)-1]), url.QueryEscape(s), url.PathEscape(s),
		testPercent(s, "/_.-~", false), testPercent(s, "_.-~", false), testPercent(s, "-_.!~*'()", false),
		testPercent(s, "*-._", true), html.EscapeString(s), strings.ReplaceAll(s, "'", `'\''`), s}
}

// testOD is b as od -An -tx1 prints it.
func testOD(b []byte) string {
	var out strings.Builder
	for i, c := range b {
		fmt.Fprintf(&out, " %02x", c)
		if i%16 == 15 {
			out.WriteByte('\n')
		}
	}
	return out.String() + "\n"
}

// testXXD is b as xxd prints it: offset, 2-byte groups, printable column.
func testXXD(b []byte) string {
	var out strings.Builder
	for off := 0; off < len(b); off += 16 {
		row := b[off:min(off+16, len(b))]
		fmt.Fprintf(&out, "%08x: ", off)
		var hexs strings.Builder
		for i, c := range row {
			fmt.Fprintf(&hexs, "%02x", c)
			if i%2 == 1 {
				hexs.WriteByte(' ')
			}
		}
		fmt.Fprintf(&out, "%-40s %s\n", hexs.String(), redacttest.XXDColumn(row))
	}
	return out.String()
}

func collect(v any, out *[]string) {
	switch t := v.(type) {
	case string:
		*out = append(*out, t)
	case map[string]any:
		for k, x := range t {
			*out = append(*out, k)
			collect(x, out)
		}
	case []any:
		for _, x := range t {
			collect(x, out)
		}
	}
}
