// Package redacttest finds what an output still shows of a secret, for
// tests of masking (internal/redact's own, and whole runs'). It is written
// apart from the masking code: it knows the forms of a secret only through
// real encoders' output (Python's, see ValueForms) and plain arithmetic, so
// a form the masking code gets wrong is not got wrong here the same way.
package redacttest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Leak says what an output still shows of a secret. It is written
// apart from the masking code: it knows the forms only through the real
// encoders' output and plain arithmetic. Shown are:
//
//   - any text form the encoders print (JSON, URL, HTML, shell escapes);
//   - 12 bytes in a row of the raw value, or of its xxd printable column;
//   - 12 bytes in a row of the value in hex (or as 16-bit words), after
//     dropping the separators hex printers use, in either case;
//   - the stable middle of base64 of the value (or of its JSON escapes)
//     at any alignment, in either alphabet, after dropping line breaks.
type Leak struct {
	text       []string
	raw, hexes map[string]bool // windows
	rawW, hexW int
	b64        []string
}

// NewLeak prepares the checks for secret; textForms[0] is the secret
// as Python's json.dumps escapes it.
func NewLeak(secret string, textForms []string) *Leak {
	c := &Leak{raw: map[string]bool{}, hexes: map[string]bool{}}
	for _, f := range textForms {
		if len(f) >= minSecretLen {
			c.text = append(c.text, f)
		}
	}
	const window = 12
	raw := []byte(secret)
	c.rawW = min(window, len(raw))
	for _, src := range [][]byte{raw, XXDColumn(raw)} {
		for i := 0; i+c.rawW <= len(src); i++ {
			if piece := src[i : i+c.rawW]; bytes.Count(piece, []byte(".")) <= c.rawW/2 || &src[0] == &raw[0] {
				c.raw[string(piece)] = true
			}
		}
	}
	hexes := []string{hex.EncodeToString(raw)}
	for a := 0; a < 2; a++ {
		var w strings.Builder
		for i := a; i+1 < len(raw); i += 2 {
			fmt.Fprintf(&w, "%02x%02x", raw[i+1], raw[i])
		}
		hexes = append(hexes, w.String())
	}
	c.hexW = 2 * c.rawW
	for _, h := range hexes {
		for i := 0; i+c.hexW <= len(h); i += 2 {
			c.hexes[h[i:i+c.hexW]] = true
		}
	}
	j, _ := json.Marshal(secret)
	for _, src := range []string{secret, string(j[1 : len(j)-1]), textForms[0]} {
		for i := 0; i < 3; i++ {
			chunk := src[min(i, len(src)):]
			chunk = chunk[:len(chunk)/3*3]
			if len(chunk) < 6 {
				continue
			}
			for _, e := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				c.b64 = append(c.b64, e.EncodeToString([]byte(chunk)))
			}
		}
	}
	return c
}

// Find names what out shows, or "".
func (c *Leak) Find(out []byte) string {
	for _, f := range c.text {
		if bytes.Contains(out, []byte(f)) {
			return "text form " + f
		}
	}
	for i := 0; i+c.rawW <= len(out); i++ {
		if c.raw[string(out[i:i+c.rawW])] {
			return fmt.Sprintf("raw bytes %q", out[i:i+c.rawW])
		}
	}
	norm := bytes.ToLower(bytes.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\r' || r == '\t' || r == ':' {
			return -1
		}
		return r
	}, out))
	for i := 0; i+c.hexW <= len(norm); i++ {
		if c.hexes[string(norm[i:i+c.hexW])] {
			return "hex " + string(norm[i:i+c.hexW])
		}
	}
	flat := bytes.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, out)
	for _, m := range c.b64 {
		if bytes.Contains(flat, []byte(m)) {
			return "base64 " + m
		}
	}
	return ""
}

// XXDColumn is b as xxd's printable column shows it.
func XXDColumn(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= 0x20 && c < 0x7f {
			out[i] = c
		} else {
			out[i] = '.'
		}
	}
	return out
}

// minSecretLen is the shortest form checked (the preflight refuses
// shorter secrets).
const minSecretLen = 8

// valueForms are the text forms of each secret as the real encoders print
// them, for leak; the first is the secret as Python's json.dumps escapes
// it, the last the secret itself.
const valueForms = `
import html, json, os, shlex, sys, urllib.parse
def forms(s):
  return [json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1], urllib.parse.quote(s), urllib.parse.quote(s, safe=""),
          urllib.parse.quote_plus(s), urllib.parse.quote(s, safe="-_.!~*'()"), urllib.parse.urlencode({"k": s})[2:],
          shlex.quote(s).strip("'"), html.escape(s), html.escape(s, quote=False), s]
json.dump([forms(s) for s in json.loads(os.environ["SECRETS"])], sys.stdout)
`

// ValueForms runs Python's encoders over secrets and returns, for each,
// its text forms as they print them: the first is the secret as Python's
// json.dumps escapes it (NewLeak's convention), the last the secret itself.
func ValueForms(secrets []string) ([][]string, error) {
	in, _ := json.Marshal(secrets)
	cmd := exec.Command("python3", "-c", valueForms)
	cmd.Env = append(os.Environ(), "SECRETS="+string(in), "LC_ALL=C.UTF-8")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("python3 (the real encoders): %w", err)
	}
	var forms [][]string
	if err := json.Unmarshal(out, &forms); err != nil {
		return nil, fmt.Errorf("python3 (the real encoders): %w", err)
	}
	return forms, nil
}
