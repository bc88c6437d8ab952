package redact

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Forms returns every form of v that is masked: the raw value, its lines,
// and its encodings (see the package documentation). Fragments shorter
// than a few bytes are left out: masking them would mask ordinary text.
func Forms(v string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string, min int) {
		if len(s) >= min && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	// addLines adds s and, when it spans lines, each line on its own: a
	// line-buffered sink sees one line at a time.
	addLines := func(s string, min int) {
		add(s, min)
		if !strings.ContainsAny(s, "\n\r") {
			return
		}
		for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
			add(strings.TrimSpace(line), minPiece)
		}
	}
	addLines(v, minPiece)
	if len(v) < MinSecretLen {
		// Too short for its encodings to be told from ordinary text; the
		// preflight refuses such a declared secret anyway.
		return out
	}
	for _, enc := range []string{jsonString(v, true), jsonString(v, false), jsonASCII(v),
		url.QueryEscape(v), url.PathEscape(v), percentAll(v, "%%%02X"), percentAll(v, "%%%02x"),
		strings.ReplaceAll(v, "'", `'\''`), strings.ReplaceAll(v, "'", `'"'"'`),
		bashBackslash(v), bashANSIC(v, true), bashANSIC(v, false), html.EscapeString(v)} {
		addLines(enc, MinSecretLen)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		raw := enc.WithPadding(base64.NoPadding)
		// At each alignment the bytes of v that fill whole 3-byte groups
		// encode to the same characters whatever surrounds them.
		for i := 0; i < 3 && i < len(v); i++ {
			chunk := v[i:]
			chunk = chunk[:len(chunk)/3*3]
			if len(chunk) < 6 {
				continue
			}
			s := raw.EncodeToString([]byte(chunk))
			add(s, MinSecretLen)
			if i == 0 { // `base64` wraps at 76 columns, `openssl base64` at 64
				for _, width := range []int{76, 64} {
					for j := 0; j+width < len(s); j += width {
						add(s[j:j+width], MinSecretLen)
					}
					if r := len(s) % width; len(s) > width && r > 0 {
						add(s[len(s)-r:], MinSecretLen)
					}
				}
			}
		}
	}
	return out
}

// jsonString is v as the inside of a JSON string literal, as Go writes it.
func jsonString(v string, html bool) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	enc.Encode(v) //nolint:errcheck // a string always encodes, into a strings.Builder that cannot fail
	s := strings.TrimSuffix(b.String(), "\n")
	return s[1 : len(s)-1]
}

// jsonASCII is v as Python's json.dumps writes it by default
// (ensure_ascii): every non-ASCII character as \uXXXX.
func jsonASCII(v string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(v, "\uFFFD") {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
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
		case r < 0x20 || (r > 0x7e && r <= 0xffff):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// percentAll escapes every byte but RFC 3986's unreserved characters, as
// encodeURIComponent and Python's quote(safe="") do.
func percentAll(v, format string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, format, c)
		}
	}
	return b.String()
}

// bashBackslash is bash's printf %q for a printable string.
func bashBackslash(v string) string {
	var b strings.Builder
	for _, r := range v {
		if strings.ContainsRune(" '\"\\$`,!^&|;()<>[]{}*?\t", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// bashANSIC is the inside of bash's $'...' form (printf %q of a string with
// control characters); utf8Locale keeps printable UTF-8 as it is.
func bashANSIC(v string, utf8Locale bool) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r >= 0x80 && !utf8Locale:
			for j := 0; j < max(size, 1); j++ {
				fmt.Fprintf(&b, `\%03o`, v[i+j])
			}
		case r < 0x20 || r == 0x7f:
			if esc, ok := ansiEscapes[r]; ok {
				b.WriteString(esc)
			} else {
				fmt.Fprintf(&b, `\%03o`, r)
			}
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\'':
			b.WriteString(`\'`)
		default:
			b.WriteRune(r)
		}
		i += max(size, 1)
	}
	return b.String()
}

var ansiEscapes = map[rune]string{'\a': `\a`, '\b': `\b`, 0x1b: `\E`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`}

// Unmaskable reports whether v spans lines none of which is long enough to
// be masked on its own. Output is masked line by line, so such a secret
// would show whole, line after line; the preflight refuses it. (A secret
// with some short lines, such as the braces of a JSON key file, is masked
// by its other lines.)
func Unmaskable(v string) bool {
	if !strings.ContainsAny(v, "\n\r") {
		return false
	}
	for _, line := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if len(strings.TrimSpace(line)) >= minPiece {
			return false
		}
	}
	return true
}
