package text

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Value writes a JSON value (as encoding/json decodes it) for people:
// numbers in full and never with an exponent (333833500, not
// 3.338335e+08, so two checksums that differ in their last digits look
// different), strings as they are, lists and objects as compact JSON with
// their keys in order — never Go's map[…] or […] notation.
func Value(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var b strings.Builder
	writeValue(&b, v)
	return b.String()
}

// Number writes x in full, without an exponent.
func Number(x float64) string {
	return strconv.FormatFloat(x, 'f', -1, 64)
}

func writeValue(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case string:
		q, _ := json.Marshal(x)
		b.Write(q)
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case float64:
		b.WriteString(Number(x))
	case float32:
		b.WriteString(Number(float64(x)))
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case json.Number:
		if f, err := x.Float64(); err == nil && strings.ContainsAny(string(x), "eE") {
			b.WriteString(Number(f))
		} else {
			b.WriteString(string(x))
		}
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, k)
			b.WriteByte(':')
			writeValue(b, x[k])
		}
		b.WriteByte('}')
	default:
		if j, err := json.Marshal(x); err == nil {
			var back any
			if json.Unmarshal(j, &back) == nil {
				writeValue(b, back)
				return
			}
		}
		fmt.Fprint(b, x)
	}
}
