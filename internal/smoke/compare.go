package smoke

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
)

// FieldDelta is one field that differs between the local and GPU results.
type FieldDelta struct {
	Field string `json:"field"`
	Local any    `json:"local"`
	GPU   any    `json:"gpu"`
}

// CompareOptions say what counts as the same result.
type CompareOptions struct {
	// Tolerance: two numbers are equal when they differ by at most this,
	// absolutely or relative to the larger magnitude (CPU and GPU kernels
	// never agree to the last bit).
	Tolerance float64
	// Ignore lists dotted fields ("timing", "models.data.created") not
	// compared, with everything under them. Array indices are not written:
	// a field inside array elements is named by the array's field.
	Ignore []string
}

// Compare returns the fields where local and gpu differ, sorted. Objects
// compare key by key, whatever their order. Arrays of objects compare as
// multisets (an API listing the same models in another order matches);
// other arrays compare element by element, in order.
func Compare(local, gpu map[string]any, o CompareOptions) []FieldDelta {
	var out []FieldDelta
	o.walk("", "", local, gpu, &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func (o CompareOptions) ignored(pattern string) bool {
	for _, ig := range o.Ignore {
		if pattern == ig || strings.HasPrefix(pattern, ig+".") {
			return true
		}
	}
	return false
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// walk compares a and b at path (shown) / pattern (path without indices,
// matched against Ignore).
func (o CompareOptions) walk(path, pattern string, a, b any, out *[]FieldDelta) {
	if pattern != "" && o.ignored(pattern) {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok || (path == "" && (a == nil || aok) && (b == nil || bok)) {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			av, ain := am[k]
			bv, bin := bm[k]
			p, pt := join(path, k), join(pattern, k)
			if o.ignored(pt) {
				continue
			}
			if !ain || !bin {
				*out = append(*out, FieldDelta{Field: p, Local: av, GPU: bv})
				continue
			}
			o.walk(p, pt, av, bv, out)
		}
		return
	}
	al, alok := a.([]any)
	bl, blok := b.([]any)
	if alok && blok {
		if objects(al) && objects(bl) {
			o.multiset(path, pattern, al, bl, out)
			return
		}
		if len(al) != len(bl) {
			*out = append(*out, FieldDelta{Field: path, Local: a, GPU: b})
			return
		}
		for i := range al {
			o.walk(fmt.Sprintf("%s[%d]", path, i), pattern, al[i], bl[i], out)
		}
		return
	}
	if !o.equalLeaf(a, b) {
		*out = append(*out, FieldDelta{Field: path, Local: a, GPU: b})
	}
}

// multiset pairs each local element with an equal GPU element; what is
// left on either side is a delta.
func (o CompareOptions) multiset(path, pattern string, al, bl []any, out *[]FieldDelta) {
	used := make([]bool, len(bl))
	var leftA []any
	for _, x := range al {
		found := false
		for j, y := range bl {
			if used[j] {
				continue
			}
			var d []FieldDelta
			o.walk(path, pattern, x, y, &d)
			if len(d) == 0 {
				used[j], found = true, true
				break
			}
		}
		if !found {
			leftA = append(leftA, x)
		}
	}
	var leftB []any
	for j, y := range bl {
		if !used[j] {
			leftB = append(leftB, y)
		}
	}
	if len(leftA) > 0 || len(leftB) > 0 {
		*out = append(*out, FieldDelta{Field: path + "[]", Local: orEmpty(leftA), GPU: orEmpty(leftB)})
	}
}

func orEmpty(l []any) any {
	if l == nil {
		return []any{}
	}
	return l
}

func objects(l []any) bool {
	if len(l) == 0 {
		return false
	}
	for _, x := range l {
		if _, ok := x.(map[string]any); !ok {
			return false
		}
	}
	return true
}

func (o CompareOptions) equalLeaf(a, b any) bool {
	x, xok := number(a)
	y, yok := number(b)
	if xok && yok {
		if x == y {
			return true
		}
		d := math.Abs(x - y)
		return d <= o.Tolerance || d <= o.Tolerance*math.Max(math.Abs(x), math.Abs(y))
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}
