package lifecycle

import (
	"fmt"
	"reflect"
	"testing"
)

func TestUploadProgressSaysEachQuarterOnce(t *testing.T) {
	var lines []string
	say := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	const mb = 1 << 20
	p := &uploadProgress{total: 40 * mb, say: say}
	a := p.at("a")
	a(5 * mb)
	a(10 * mb) // a quarter of the total
	a(2 * mb)  // a redialled try starts again: no line, no double count
	a(20 * mb)
	p.done("a")
	b := p.at("b")
	b(15 * mb)
	b(20 * mb)
	p.done("b")
	want := []string{
		"uploaded 25% (10.5 of 41.9 MB)",
		"uploaded 50% (21.0 of 41.9 MB)",
		"uploaded 75% (36.7 of 41.9 MB)",
		"uploaded 100% (41.9 of 41.9 MB)",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("progress lines\n got %q\nwant %q", lines, want)
	}

	lines = nil
	small := &uploadProgress{total: uploadProgressMin - 1, say: say}
	small.at("x")(uploadProgressMin - 1)
	small.done("x")
	if len(lines) != 0 {
		t.Fatalf("a small upload should be quiet, said %q", lines)
	}
}
