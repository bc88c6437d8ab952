package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSumTreeMatchesOnlyTheSameFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, root := range []string{a, b} {
		os.MkdirAll(filepath.Join(root, "data", "sub"), 0o755)
		os.WriteFile(filepath.Join(root, "train.py"), []byte("print(1)\n"), 0o644)
		os.WriteFile(filepath.Join(root, "data", "sub", "x.bin"), []byte{1, 2, 3}, 0o644)
	}
	paths := []string{"train.py", "data", "missing"}
	ma, err := SumTree(a, paths)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := SumTree(b, paths)
	if len(ma) != 2 || !reflect.DeepEqual(ma, mb) {
		t.Fatalf("same trees differ: %v %v", ma, mb)
	}
	os.WriteFile(filepath.Join(b, "data", "sub", "x.bin"), []byte{1, 2, 4}, 0o644)
	if mb, _ = SumTree(b, paths); reflect.DeepEqual(ma, mb) {
		t.Fatal("a changed byte still matches")
	}
}
