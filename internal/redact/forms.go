package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Forms returns the text forms of v that are masked as they are: the raw
// value, its lines, and its escapes (see the package documentation).
// Fragments shorter than a few bytes are left out: masking them would mask
// ordinary text. The encoded forms (base64, hex) are matched apart, in
// views of the text that ignore how they are wrapped: see encodedForms.
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
	if !utf8.ValidString(v) {
		// What a reader decoding it as UTF-8 shows: each bad byte, or each
		// run of them, as U+FFFD (a JSON document decoded, say).
		addLines(replaceBadUTF8(v), minPiece)
		addLines(strings.ToValidUTF8(v, "\uFFFD"), minPiece)
	}
	if len(v) < MinSecretLen {
		// Too short for its encodings to be told from ordinary text; the
		// preflight refuses such a declared secret anyway.
		return out
	}
	forms := jsonForms(v)
	forms = append(forms, urlForms(v)...)
	forms = append(forms, shellForms(v)...)
	forms = append(forms, htmlForms(v)...)
	for _, enc := range forms {
		addLines(enc, MinSecretLen)
	}
	return out
}

// jsonForms is v inside a JSON string as the common encoders write it: Go
// (with and without HTML escapes), minimal (JavaScript's JSON.stringify,
// Python's ensure_ascii=False), Python's default ensure_ascii (\u00e9, in
// either case) and PHP's default (also \/).
func jsonForms(v string) []string {
	ascii := jsonASCII(v)
	return []string{jsonString(v, true), jsonString(v, false), jsonMinimal(v), ascii,
		upperUnicodeEscapes(ascii), strings.ReplaceAll(ascii, "/", `\/`)}
}

// urlForms is v percent-encoded by the common encoders. Each keeps a
// different set of characters as they are (besides letters and digits):
// Go's QueryEscape and Python's quote_plus "-_.~" with space as '+'; Go's
// PathEscape; RFC 3986 strictly (Python's quote(safe=""), PHP's
// rawurlencode), in either case of hex digit; Python's quote "-_.~/";
// JavaScript's encodeURIComponent "-_.!~*'()" and encodeURI also
// ";,/?:@&=+$#"; and form encoding (URLSearchParams, Java's URLEncoder,
// PHP's urlencode) "*-._" with space as '+'.
func urlForms(v string) []string {
	return []string{url.QueryEscape(v), url.PathEscape(v),
		percent(v, "-_.~", false, false), percent(v, "-_.~", false, true),
		percent(v, "-_.~/", false, false),
		percent(v, "-_.!~*'()", false, false), percent(v, "-_.!~*'();,/?:@&=+$#", false, false),
		percent(v, "*-._", true, false)}
}

// shellForms is the inside of v quoted for a shell: POSIX single quotes
// (both ways of writing a quote inside them: close, \', reopen; and Python's
// shlex.quote '"'"'), double quotes, bash's printf %q, and bash's $'...'.
func shellForms(v string) []string {
	return []string{strings.ReplaceAll(v, "'", `'\''`), strings.ReplaceAll(v, "'", `'"'"'`),
		doubleQuoted(v), bashBackslash(v, false), bashBackslash(v, true), bashANSIC(v, true), bashANSIC(v, false)}
}

// htmlForms is v HTML-escaped: & < > always, and the quotes as each
// escaper writes them (Go's &#34; &#39;, Python's html.escape &quot;
// &#x27;, &apos;), or left as they are (html.escape(quote=False)).
func htmlForms(v string) []string {
	base := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(v)
	out := []string{html.EscapeString(v), base}
	for _, dq := range []string{"&#34;", "&quot;", "&#x22;"} {
		for _, sq := range []string{"&#39;", "&#x27;", "&apos;"} {
			out = append(out, strings.NewReplacer(`"`, dq, "'", sq).Replace(base))
		}
	}
	return out
}

// encodedForms are the base64 and hex forms of v, matched in views that
// ignore line breaks and spaces (see view.go).
//
// base64: at each of the three byte alignments, the bytes of the value
// that fill whole 3-byte groups encode to the same characters whatever
// surrounds them and whatever the padding, so that stable middle is what
// is matched; in both alphabets, of v and of its JSON-escaped forms (the
// product itself base64-encodes JSON lines: agent-status.json's metrics).
//
// hex: the bytes of v in lowercase hex (the view lowercases), and as
// 16-bit little-endian words (od -x, hexdump without -C) at both
// alignments.
//
// Each form is also added without its first one or two characters: a
// streamed writer may already have let a line ending in those through
// before the rest arrives (see Writer).
func encodedForms(v string) (b64, hexs []string) {
	if len(v) < MinSecretLen {
		return nil, nil
	}
	seen := map[string]bool{}
	add := func(list *[]string, s string) {
		if len(s) < MinSecretLen {
			return
		}
		// Cut forms as short as 6 characters (36 bits of base64): the
		// shortest forms are 8.
		for cut := 0; cut < holdLen && len(s)-cut >= 6; cut++ {
			if t := s[cut:]; !seen[t] {
				seen[t] = true
				*list = append(*list, t)
			}
		}
	}
	srcs := append([]string{v}, jsonForms(v)...)
	for _, src := range srcs {
		if seen["src:"+src] {
			continue
		}
		seen["src:"+src] = true
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for i := 0; i < 3 && i < len(src); i++ {
				chunk := src[i:]
				chunk = chunk[:len(chunk)/3*3]
				if len(chunk) >= 6 {
					add(&b64, enc.EncodeToString([]byte(chunk)))
				}
			}
		}
	}
	add(&hexs, hex.EncodeToString([]byte(v)))
	for a := 0; a < 2; a++ {
		var w strings.Builder
		for i := a; i+1 < len(v); i += 2 {
			fmt.Fprintf(&w, "%02x%02x", v[i+1], v[i])
		}
		add(&hexs, w.String())
	}
	return b64, hexs
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
// (ensure_ascii): every non-ASCII character as \uXXXX, and a byte that is
// not UTF-8 as Python reads it from the environment (surrogateescape:
// \udcXX).
func jsonASCII(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\udc%02x`, v[i])
			i++
			continue
		}
		i += size
		switch {
		case jsonShort[r] != "":
			b.WriteString(jsonShort[r])
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

// percent escapes every byte but letters, digits and the safe ones, in
// upper- or lowercase hex, and a space as '+' when plus is set.
func percent(v, safe string, plus, lower bool) string {
	const upperHex, lowerHexDigits = "0123456789ABCDEF", "0123456789abcdef"
	digits := upperHex
	if lower {
		digits = lowerHexDigits
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte(safe, c) >= 0:
			b.WriteByte(c)
		case c == ' ' && plus:
			b.WriteByte('+')
		default:
			b.WriteByte('%')
			b.WriteByte(digits[c>>4])
			b.WriteByte(digits[c&15])
		}
	}
	return b.String()
}

// doubleQuoted is the inside of "..." for a POSIX shell.
func doubleQuoted(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`").Replace(v)
}

// jsonMinimal escapes only what JSON requires: the quote, the backslash
// and control characters (JavaScript's JSON.stringify).
func jsonMinimal(v string) string {
	var b strings.Builder
	for _, r := range replaceBadUTF8(v) {
		switch {
		case jsonShort[r] != "":
			b.WriteString(jsonShort[r])
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// jsonShort holds the two-character escapes every JSON writer uses for
// these runes (the quote, the backslash, five controls); other controls are
// \uXXXX.
var jsonShort = map[rune]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\b': `\b`, '\f': `\f`}

// upperUnicodeEscapes writes the hex digits of \uXXXX escapes in uppercase.
func upperUnicodeEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+5 < len(b); i++ {
		if b[i] == '\\' && b[i+1] == '\\' {
			i++
			continue
		}
		if b[i] == '\\' && b[i+1] == 'u' {
			for j := i + 2; j < i+6; j++ {
				if b[j] >= 'a' && b[j] <= 'f' {
					b[j] -= 'a' - 'A'
				}
			}
			i += 5
		}
	}
	return string(b)
}

// bashBackslash is bash's printf %q for a printable string
// (sh_backslash_quote, lib/sh/shquote.c). With tilde set, as bash 5 writes
// it: a '~' that would expand (first, or after '=' or ':') and a leading
// '#' are escaped too; older bash leaves both.
func bashBackslash(v string, tilde bool) string {
	var b strings.Builder
	var prev rune
	for i, r := range v {
		switch {
		case strings.ContainsRune(" '\"\\$`,!^&|;()<>[]{}*?\t", r),
			tilde && r == '~' && (i == 0 || prev == '=' || prev == ':'),
			tilde && r == '#' && i == 0:
			b.WriteByte('\\')
		}
		b.WriteRune(r)
		prev = r
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

// replaceBadUTF8 replaces each byte of v that is not UTF-8 with U+FFFD, as
// encoding/json does.
func replaceBadUTF8(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		b.WriteRune(r) // utf8.RuneError for a bad byte
		i += size
	}
	return b.String()
}
