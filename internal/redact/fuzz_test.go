package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os/exec"
	"strings"
	"testing"
)

// FuzzRedact feeds random secrets (any bytes: newlines, quotes,
// backslashes, unicode, NUL) through the encoders a workload would use —
// the standard library's, and real bash and coreutils base64 — and through
// every masking path (Bytes, the line-buffered Writer in random chunks,
// JSON after decoding). No output may contain the secret, a line of it,
// or an encoding of it.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{multiLine, jsonish, "plainsecret123", "a\x00b\x00c\x00d\x00", "ünïcødé-sëcret-☃", `'\''"\"$(x)` + "`", "\r\n\r\nlines\r\nwith\r\nCRLF!"} {
		f.Add(s, "pre ", 7)
	}
	f.Fuzz(func(t *testing.T, secret, prefix string, cut int) {
		if len(secret) < MinSecretLen || len(secret) > 512 || len(prefix) > 64 {
			return // the preflight refuses short secrets; long ones only slow the fuzzer
		}
		r := New(secret)
		jsonEnc, _ := json.Marshal(secret)
		var noHTML bytes.Buffer
		enc := json.NewEncoder(&noHTML)
		enc.SetEscapeHTML(false)
		enc.Encode(secret)
		artifacts := map[string]string{
			"raw":       prefix + secret + "\n",
			"json":      `{"v": ` + string(jsonEnc) + "}",
			"json html": noHTML.String(),
			"query":     "?k=" + url.QueryEscape(secret),
			"path":      "/" + url.PathEscape(secret),
			"base64":    base64.StdEncoding.EncodeToString([]byte(prefix + secret)),
			"base64url": base64.RawURLEncoding.EncodeToString([]byte(secret + prefix)),
			"shell":     "'" + strings.ReplaceAll(secret, "'", `'\''`) + "'",
		}
		// Real bash and base64(1), when the value can live in an environment.
		if !strings.Contains(secret, "\x00") {
			cmd := exec.Command("bash", "-c", `printf '%q\n' "$S"; printf '%s\n' "$S" | base64`)
			cmd.Env = []string{"S=" + secret, "LANG=C.UTF-8"}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("bash: %v", err)
			}
			artifacts["bash"] = string(out)
		}
		// What must never show: the secret, its lines, its encodings.
		forbidden := []string{secret}
		for _, line := range strings.FieldsFunc(secret, func(r rune) bool { return r == '\n' || r == '\r' }) {
			if l := strings.TrimSpace(line); len(l) >= MinSecretLen {
				forbidden = append(forbidden, l)
			}
		}
		if s := string(jsonEnc[1 : len(jsonEnc)-1]); len(s) >= MinSecretLen {
			forbidden = append(forbidden, s)
		}
		aligned := secret[:len(secret)/3*3]
		b64 := base64.StdEncoding.EncodeToString([]byte(aligned))
		forbidden = append(forbidden, url.QueryEscape(secret), url.PathEscape(secret))
		for name, a := range artifacts {
			var w bytes.Buffer
			rw := r.Writer(&w)
			c := 1 + (cut&0xff)%17
			for i := 0; i < len(a); i += c {
				rw.Write([]byte(a[i:min(i+c, len(a))]))
			}
			rw.Close()
			outs := map[string]string{"Bytes": r.String(a), "Writer": w.String(), "JSON": string(r.JSON([]byte(a)))}
			for how, out := range outs {
				for _, bad := range forbidden {
					if strings.Contains(out, bad) {
						t.Fatalf("%s via %s leaked %q:\n%q", name, how, bad, out)
					}
				}
				// base64 is checked with its line breaks removed, so that
				// wrapped output counts too.
				if len(aligned) >= 6 && strings.Contains(strings.ReplaceAll(out, "\n", ""), b64) && strings.HasPrefix(name, "bash") {
					t.Fatalf("%s via %s leaked base64 %q:\n%q", name, how, b64, out)
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
