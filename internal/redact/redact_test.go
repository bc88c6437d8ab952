package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"testing"
)

func TestMasksValuesAndShapes(t *testing.T) {
	vastKey := strings.Repeat("0f", 32)
	r := New("sup3rsecret", "ab", vastKey)
	in := strings.Join([]string{
		"key=sup3rsecret!",
		"gh token ghp_" + strings.Repeat("a", 36),
		"hf_" + strings.Repeat("B", 34),
		"aws AKIAABCDEFGHIJKLMNOP",
		"vast " + strings.Repeat("0f", 32),
		"Authorization: Bearer abcdefghijklmnopqrstuvwxyz123",
		"jwt eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4",
		"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
		"keep abc and commit 0123456789abcdef0123456789abcdef01234567",
		"digest sha256:" + strings.Repeat("ab", 32),
	}, "\n")
	out := r.String(in)
	for _, leaked := range []string{"sup3rsecret", "ghp_aaaa", "hf_BBB", "AKIAABCD", "0f0f0f0f", "abcdefghijklmnop", "SflKxw", "b3BlbnNzaC1rZXk"} {
		if strings.Contains(out, leaked) {
			t.Errorf("leaked %q in:\n%s", leaked, out)
		}
	}
	// Short values are not masked, and a 40-hex git commit is not a secret.
	// A 40-hex commit and a 64-hex digest are evidence, not secrets.
	if !strings.Contains(out, "keep abc") || !strings.Contains(out, "0123456789abcdef0123456789abcdef01234567") || !strings.Contains(out, strings.Repeat("ab", 32)) {
		t.Errorf("over-masked:\n%s", out)
	}
}

func TestWriterCatchesSecretsSplitAcrossWrites(t *testing.T) {
	var buf bytes.Buffer
	w := New("split-secret-value").Writer(&buf)
	for _, part := range []string{"a split-sec", "ret-val", "ue here\nsecond line split-", "secret-value"} {
		w.Write([]byte(part))
	}
	w.Close()
	if strings.Contains(buf.String(), "secret-value") || buf.String() != "a *** here\nsecond line ***" {
		t.Fatalf("got %q", buf.String())
	}
}

func TestWriterLongLine(t *testing.T) {
	// Place the secret at every offset around the internal cut points.
	for shift := 0; shift < 1200; shift += 37 {
		var buf bytes.Buffer
		w := New("needle-secret").Writer(&buf)
		long := strings.Repeat("x", maxLine-4096+shift) + "needle-secret" + strings.Repeat("y", maxLine)
		for i := 0; i < len(long); i += 1000 {
			w.Write([]byte(long[i:min(i+1000, len(long))]))
		}
		w.Close()
		if strings.Contains(buf.String(), "needle") || buf.Len() != len(long)-len("needle-secret")+len(Mask) {
			t.Fatalf("shift %d: leaked or lost bytes (len %d)", shift, buf.Len())
		}
	}
}

// canaries are the examples: a secret spanning lines and one that
// JSON escaping changes.
const (
	multiLine = "CANARYML_first_a1b2\nCANARYML_second_c3d4"
	jsonish   = `CANARYJS<x>&"q"\z_5e6f`
)

func TestMultiLineSecretMaskedLineByLine(t *testing.T) {
	var buf bytes.Buffer
	w := New(multiLine).Writer(&buf)
	io.WriteString(w, "start\n"+multiLine+"\nend\n")
	w.Close()
	if strings.Contains(buf.String(), "CANARYML") {
		t.Fatalf("leaked: %q", buf.String())
	}
	if buf.String() != "start\n***\n***\nend\n" {
		t.Fatalf("got %q", buf.String())
	}
}

func TestJSONMaskedAfterDecoding(t *testing.T) {
	r := New(jsonish, multiLine)
	doc, _ := json.MarshalIndent(map[string]any{"z_first": "x " + jsonish + " y", "a": []any{multiLine, 1.5, true}, jsonish: "key"}, "", "  ")
	out := r.JSON(doc)
	if !json.Valid(out) {
		t.Fatalf("not JSON any more: %s", out)
	}
	if bytes.Contains(out, []byte("CANARY")) {
		t.Fatalf("leaked: %s", out)
	}
	var back map[string]any
	json.Unmarshal(out, &back)
	if back["z_first"] != "x *** y" || back["***"] != "key" || back["a"].([]any)[0] != "***" {
		t.Fatalf("masked wrongly: %s", out)
	}
	// Layout and key order survive: only the strings changed.
	if !bytes.HasPrefix(out, []byte("{\n  \"")) {
		t.Fatalf("layout lost: %s", out)
	}
}

func TestEncodedFormsMasked(t *testing.T) {
	s := `p@ss w0rd/"é"'` + "\n" + `tail\line`
	r := New(s)
	b64 := base64.StdEncoding.EncodeToString([]byte(s + "\n"))
	jsonEnc, _ := json.Marshal(s)
	for name, in := range map[string]string{
		"json":        string(jsonEnc),
		"query":       "https://x.test/?token=" + url.QueryEscape(s) + "&a=1",
		"path":        "https://x.test/" + url.PathEscape(s),
		"base64":      b64,
		"base64 mid":  base64.StdEncoding.EncodeToString([]byte("xy" + s + "zz")),
		"base64 url":  base64.RawURLEncoding.EncodeToString([]byte("q" + s)),
		"shell":       "export X='" + strings.ReplaceAll(s, "'", `'\''`) + "'",
		"bash printf": `$'p@ss w0rd/"é"\'\ntail\\line'`,
	} {
		out := r.String(in)
		if out == in {
			t.Errorf("%s: not masked: %s", name, in)
		}
		if strings.Contains(out, "w0rd") {
			t.Errorf("%s: leaked: %s", name, out)
		}
	}
	// A shorter value (a digest, a word) is not over-masked.
	if got := r.String("password ok"); got != "password ok" {
		t.Errorf("over-masked: %q", got)
	}
}

func TestUnmaskable(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"one line, any length", false},
		{"abcdefgh\nijklmnop", false},
		{"{\n  \"private_key\": \"MIIEvQIBADAN\"\n}\n", false}, // short lines beside a long one
		{"`\\\\\r\nend", true},
		{"abc\nxy\n\n  de  \n", true},
	} {
		if got := Unmaskable(c.v); got != c.want {
			t.Errorf("Unmaskable(%q) = %v, want %v", c.v, got, c.want)
		}
	}
}

// The pattern set is built on the first mask after an Add; Adds and masks
// from many goroutines must still see every value added before the mask
// began (go test -race).
func TestLazyPatternsConcurrent(t *testing.T) {
	r := New("first-secret-value")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := fmt.Sprintf("secret-number-%d-xyz", i)
			r.Add(v)
			if got := r.String("a " + v + " b first-secret-value"); got != "a *** b ***" {
				t.Errorf("masked %q", got)
			}
		}()
	}
	wg.Wait()
}
