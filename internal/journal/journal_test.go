package journal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/redact"
)

func TestAppendReadAndResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, func() time.Time { return time.Unix(100, 0) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append("intent", "rent", map[string]any{"label": "L", "offer": 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append("done", "rent", map[string]any{"instance": 42}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("run dir mode %v", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(j.Path()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode %v", fi.Mode().Perm())
	}
	j.Close()

	recs, err := Read(dir)
	if err != nil || len(recs) != 2 || recs[1].Seq != 2 || recs[0].Type != "intent" {
		t.Fatalf("read: %+v %v", recs, err)
	}
	var d struct{ Instance int }
	if err := recs[1].Decode(&d); err != nil || d.Instance != 42 {
		t.Fatalf("decode: %+v %v", d, err)
	}
	// Reopen continues the sequence.
	j, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := j.Append("event", "x", nil)
	if r.Seq != 3 {
		t.Fatalf("seq after reopen = %d", r.Seq)
	}
	j.Close()
}

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}

func TestTornLastLineIsIgnoredButDamageIsNot(t *testing.T) {
	dir := t.TempDir()
	j, _ := Open(dir, nil)
	j.Append("intent", "rent", nil)
	j.Close()
	f, _ := os.OpenFile(filepath.Join(dir, FileName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"v":1,"seq":2,"type":"do`) // crash mid-write
	f.Close()
	recs, err := Read(dir)
	if err != nil || len(recs) != 1 {
		t.Fatalf("torn tail: %d %v", len(recs), err)
	}
	// Reopening must still work and continue after the last complete record.
	j, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen with torn tail: %v", err)
	}
	if r, err := j.Append("done", "rent", nil); err != nil || r.Seq != 2 {
		t.Fatalf("append after torn tail: %+v %v", r, err)
	}
	j.Close()
	if recs, err := Read(dir); err != nil || len(recs) != 2 {
		t.Fatalf("journal after repair: %d %v", len(recs), err)
	}

	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, FileName), []byte("garbage\n{\"v\":1,\"seq\":1,\"type\":\"x\"}\n"), 0o600)
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("damage in the middle must be an error naming the line: %v", err)
	}
	gap := t.TempDir()
	os.WriteFile(filepath.Join(gap, FileName), []byte("{\"v\":1,\"seq\":1,\"type\":\"x\"}\n{\"v\":1,\"seq\":3,\"type\":\"x\"}\n"), 0o600)
	if _, err := Read(gap); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a sequence gap must be an error: %v", err)
	}
}

func TestWriteFaultWritesNothing(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Append("event", "start", map[string]string{"run_id": "r"}); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	j.SetWriteFault(func(r Record) error {
		if r.Type == "intent" {
			return full
		}
		return nil
	})
	if _, err := j.Append("intent", "rent", nil); !errors.Is(err, full) {
		t.Fatalf("append under a write fault: %v", err)
	}
	if _, err := j.Append("event", "after", nil); err != nil {
		t.Fatal(err)
	}
	recs, err := j.Records()
	if err != nil || len(recs) != 2 || recs[1].Step != "after" || recs[1].Seq != 2 {
		t.Fatalf("records after a failed append: %+v %v", recs, err)
	}
}

// A journal that is one torn line is the only record of its run: reading
// it is an error, and opening it leaves every byte where it was.
func TestTornOnlyLineIsNeverCut(t *testing.T) {
	for _, content := range []string{
		`{"v":1,"seq":1,"time":"2026-12-04T00:00:00Z","type":"event","step":"start","data":{"run_id":"ab`,
		"\n\n{\"v\":1,\"se",
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, FileName)
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := Read(dir); !errors.Is(err, ErrTornOnly) {
			t.Errorf("%q: Read = %v, want ErrTornOnly", content, err)
		}
		if j, err := Open(dir, nil); !errors.Is(err, ErrTornOnly) {
			if j != nil {
				j.Close()
			}
			t.Errorf("%q: Open = %v, want ErrTornOnly", content, err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("%q: the journal changed to %q", content, b)
		}
	}
	// Empty and blank journals hold no run, and are no damage.
	for _, content := range []string{"", "\n", "  \n"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600)
		if recs, err := Read(dir); err != nil || len(recs) != 0 {
			t.Errorf("%q: %d %v", content, len(recs), err)
		}
	}
}

// TestRecordsAreMaskedBeforeTheMirrorAndTheFile: with a redactor, a secret
// in a record's data (raw, or hex-encoded) reaches neither the mirror nor
// the file, and the data stays JSON.
func TestRecordsAreMaskedBeforeTheMirrorAndTheFile(t *testing.T) {
	const secret = `tok-"q'/\ é☃-0123`
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mirrored []Record
	j.SetMirror(func(r Record) error { mirrored = append(mirrored, r); return nil })
	j.SetRedactor(redact.New(secret))
	if _, err := j.Append("failed", "work", map[string]any{"error": "curl -H 'token: " + secret + "' failed", "dump": hex.EncodeToString([]byte(secret))}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	b, _ := os.ReadFile(j.Path())
	for _, out := range [][]byte{b, mirrored[0].Data} {
		if bytes.Contains(out, []byte("0123")) {
			t.Fatalf("the secret reached the journal or its mirror: %s", out)
		}
	}
	recs, err := Read(dir)
	var d struct{ Error, Dump string }
	if err != nil || recs[0].Decode(&d) != nil || d.Error != "curl -H 'token: ***' failed" || d.Dump != "***" {
		t.Fatalf("masked record: %+v %v", d, err)
	}
}
