package redact

import (
	"bytes"
	"encoding/json"
)

// JSON masks a JSON document after decoding: each string literal (keys
// included) is decoded, masked as a value and re-encoded, and everything
// else is kept byte for byte, so key order and layout survive and a mask
// never lands inside an escape sequence. Input that is not valid JSON is
// masked as text. Should a form of a secret still show in the result (a
// value that spells JSON syntax across tokens), the text is masked too:
// a leak is worse than a document that no longer parses.
func (r *Redactor) JSON(b []byte) []byte {
	if !json.Valid(b) {
		return r.Bytes(b)
	}
	var out bytes.Buffer
	out.Grow(len(b))
	for i := 0; i < len(b); {
		if b[i] != '"' {
			out.WriteByte(b[i])
			i++
			continue
		}
		end := stringEnd(b, i)
		lit := b[i:end]
		var s string
		if err := json.Unmarshal(lit, &s); err != nil {
			out.Write(r.Bytes(lit))
		} else if m := r.String(s); m != s {
			enc, _ := json.Marshal(m)
			out.Write(enc)
		} else {
			out.Write(lit)
		}
		i = end
	}
	res := out.Bytes()
	if r.Contains(res) || shapes().Match(res) {
		res = r.Bytes(res)
	}
	return res
}

// stringEnd returns the index just past the string literal opening at i.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// Value masks every string inside v (a decoded JSON value: maps, slices,
// strings, numbers), keys included, and returns the masked copy.
func (r *Redactor) Value(v any) any {
	switch t := v.(type) {
	case string:
		return r.String(t)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[r.String(k)] = r.Value(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = r.Value(x)
		}
		return out
	}
	return v
}
