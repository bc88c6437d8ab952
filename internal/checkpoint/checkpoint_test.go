package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/storage"
)

var ctx = context.Background()
var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func stores(t *testing.T) map[string]storage.Store {
	fs, err := storage.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	backend.CreateBucket("ckpt")
	yes := true
	s3, err := storage.Open("s3://ckpt/run1", storage.Options{Endpoint: srv.URL, PathStyle: &yes, AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]storage.Store{"file": fs, "s3": s3}
}

// writeCheckpoint makes a checkpoint directory the way a workload would.
func writeCheckpoint(t *testing.T, step int64) string {
	dir := filepath.Join(t.TempDir(), fmt.Sprint(step))
	os.MkdirAll(filepath.Join(dir, "optim"), 0o755)
	os.WriteFile(filepath.Join(dir, "weights.bin"), bytes.Repeat([]byte{byte(step)}, 1000+int(step)), 0o644)
	os.WriteFile(filepath.Join(dir, "optim", "state.json"), []byte(fmt.Sprintf(`{"step": %d}`, step)), 0o644)
	os.WriteFile(filepath.Join(dir, checkpoint.CompleteMarker), nil, 0o644)
	return dir
}

func TestCommitRestoreFallbackPrune(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checkpoint.Store{S: s}
			if _, _, err := c.RestoreLatest(ctx, filepath.Join(t.TempDir(), "r")); !errors.Is(err, checkpoint.ErrNoCheckpoint) {
				t.Fatalf("empty store: %v", err)
			}
			for _, step := range []int64{100, 200, 300} {
				cm, err := c.Commit(ctx, writeCheckpoint(t, step), step, now)
				if err != nil || cm.Step != step || len(cm.Manifest.Files) != 2 {
					t.Fatalf("commit %d: %+v %v", step, cm, err)
				}
			}
			// An upload that never got its marker does not count.
			s.Put(ctx, "checkpoints/000000000400/files/weights.bin", bytes.NewReader([]byte("partial")))
			list, err := c.Committed(ctx)
			if err != nil || len(list) != 3 || list[0].Step != 300 {
				t.Fatalf("committed: %+v %v", list, err)
			}

			dir := filepath.Join(t.TempDir(), "restored")
			got, skipped, err := c.RestoreLatest(ctx, dir)
			if err != nil || got.Step != 300 || len(skipped) != 0 {
				t.Fatalf("restore latest: %+v %v %v", got, skipped, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "optim", "state.json")); string(b) != `{"step": 300}` {
				t.Fatalf("restored content: %q", b)
			}
			if _, err := os.Stat(filepath.Join(dir, checkpoint.CompleteMarker)); err == nil {
				t.Fatal("the workload's marker should not be part of the checkpoint")
			}

			// Corrupt the newest committed checkpoint: the previous one is used.
			s.Put(ctx, "checkpoints/000000000300/files/weights.bin", bytes.NewReader([]byte("bit rot")))
			got, skipped, err = c.RestoreLatest(ctx, dir)
			if err != nil || got.Step != 200 || len(skipped) != 1 || skipped[0].Step != 300 {
				t.Fatalf("fallback: %+v %+v %v", got, skipped, err)
			}
			if _, err := c.Restore(ctx, 300, dir); !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("restore of a corrupt checkpoint: %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "optim", "state.json")); string(b) != `{"step": 200}` {
				t.Fatalf("a failed restore must leave the last good restore in place: %q", b)
			}

			// Idempotent re-commit; conflicting content is refused.
			if _, err := c.Commit(ctx, writeCheckpoint(t, 200), 200, now.Add(time.Hour)); err != nil {
				t.Fatalf("re-commit of identical files: %v", err)
			}
			other := writeCheckpoint(t, 200)
			os.WriteFile(filepath.Join(other, "weights.bin"), []byte("different"), 0o644)
			if _, err := c.Commit(ctx, other, 200, now); !errors.Is(err, checkpoint.ErrConflict) {
				t.Fatalf("conflicting commit: %v", err)
			}

			// Prune keeps the newest two committed (300, 200) and removes 100.
			// (300's files are corrupt, but its marker and manifest agree:
			// only a restore's re-hash can tell, as above.)
			if err := c.Prune(ctx, 2); err != nil {
				t.Fatal(err)
			}
			list, _ = c.Committed(ctx)
			if len(list) != 2 || list[0].Step != 300 || list[1].Step != 200 {
				t.Fatalf("after prune: %+v", list)
			}
			if objs, _ := s.List(ctx, "checkpoints/000000000100/"); len(objs) != 0 {
				t.Fatalf("pruned checkpoint left objects: %+v", objs)
			}
			if objs, _ := s.List(ctx, "checkpoints/000000000400/"); len(objs) != 1 {
				t.Fatalf("a partial upload newer than every commit must be left alone (it may be in flight): %+v", objs)
			}
		})
	}
}

func TestPruneNeverDeletesBeforeTheNextCommits(t *testing.T) {
	s := stores(t)["file"]
	c := checkpoint.Store{S: s}
	c.Commit(ctx, writeCheckpoint(t, 10), 10, now)
	// A newer checkpoint is mid-upload: files but no marker yet.
	s.Put(ctx, "checkpoints/000000000020/files/weights.bin", bytes.NewReader([]byte("half")))
	if err := c.Prune(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if list, _ := c.Committed(ctx); len(list) != 1 || list[0].Step != 10 {
		t.Fatalf("the only committed checkpoint was pruned: %+v", list)
	}
}

// Two agents committing the same step at once (the watcher and a final
// --once) must leave it committed: a marker that matches its manifest.
func TestConcurrentCommitsOfOneStep(t *testing.T) {
	for round := 0; round < 20; round++ {
		s := stores(t)["file"]
		c := checkpoint.Store{S: s}
		dir := writeCheckpoint(t, 30)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Different times: the committers' manifests differ in bytes.
				_, errs[i] = c.Commit(ctx, dir, 30, now.Add(time.Duration(i)*time.Second))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d committer %d: %v", round, i, err)
			}
		}
		if list, err := c.Committed(ctx); err != nil || len(list) != 1 || list[0].Step != 30 {
			t.Fatalf("round %d: committed after racing commits: %+v %v", round, list, err)
		}
	}
}

// TestRestoreVerifiesEveryPart: a file of several parts is committed with
// per-part digests, restored range by range against them, and one changed
// byte in one range makes the checkpoint corrupt.
func TestRestoreVerifiesEveryPart(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checkpoint.Store{S: s}
			dir := filepath.Join(t.TempDir(), "ck")
			os.MkdirAll(dir, 0o755)
			data := make([]byte, 19<<20+7) // three ranges of 8 MiB, the last short
			for i := range data {
				data[i] = byte(i*31 + i>>13)
			}
			os.WriteFile(filepath.Join(dir, "model.bin"), data, 0o644)
			cm, err := c.Commit(ctx, dir, 7, now)
			if err != nil {
				t.Fatal(err)
			}
			f := cm.Manifest.Files[0]
			if f.Parts == nil || len(f.Parts.SHA256) != 3 || f.Parts.Size != 8<<20 {
				t.Fatalf("manifest entry %+v: want three part digests of 8 MiB", f)
			}
			out := filepath.Join(t.TempDir(), "restored")
			if _, err := c.Restore(ctx, 7, out); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(out, "model.bin")); !bytes.Equal(b, data) {
				t.Fatal("restored bytes differ")
			}
			bad := bytes.Clone(data)
			bad[9<<20] ^= 1 // in the second range
			if _, err := s.Put(ctx, "checkpoints/000000000007/files/model.bin", bytes.NewReader(bad)); err != nil {
				t.Fatal(err)
			}
			_, err = c.Restore(ctx, 7, out)
			if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.Is(err, storage.ErrDigestMismatch) {
				t.Fatalf("restore of a file with one changed byte: %v, want ErrCorrupt from ErrDigestMismatch", err)
			}
		})
	}
}

// TestCorruptPieceLeavesThePreviousRestore: a checkpoint of one file of
// several parts (restored by one stream that hashes its parts in pairs)
// and many small files (restored at once). One changed byte anywhere (a
// held part, the part hashed beside it, the short last part, one small
// file among many) fails the restore as ErrCorrupt and leaves the
// directory as the last good restore left it: nothing half restored is
// presented, and no temporary directory is left behind.
func TestCorruptPieceLeavesThePreviousRestore(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checkpoint.Store{S: s}
			dir := filepath.Join(t.TempDir(), "ck")
			os.MkdirAll(dir, 0o755)
			files := map[string][]byte{"model.bin": make([]byte, 3<<23+1<<20+5)} // four ranges, the last short
			for i := range files["model.bin"] {
				files["model.bin"][i] = byte(i*7 + i>>11)
			}
			for i := range 12 {
				files[fmt.Sprintf("shard-%02d.bin", i)] = bytes.Repeat([]byte{byte(i), byte(i >> 1)}, 40000+i)
			}
			for p, b := range files {
				os.WriteFile(filepath.Join(dir, p), b, 0o644)
			}
			if _, err := c.Commit(ctx, dir, 9, now); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			out := filepath.Join(root, "restored")
			if _, err := c.Restore(ctx, 9, out); err != nil {
				t.Fatal(err)
			}
			same := func(when string) {
				t.Helper()
				entries, _ := os.ReadDir(out)
				if len(entries) != len(files) {
					t.Fatalf("%s: %d files restored, want %d", when, len(entries), len(files))
				}
				for p, b := range files {
					if got, _ := os.ReadFile(filepath.Join(out, p)); !bytes.Equal(got, b) {
						t.Fatalf("%s: %s differs from the committed file", when, p)
					}
				}
				if left, _ := filepath.Glob(filepath.Join(root, ".restore-*")); len(left) > 0 {
					t.Fatalf("%s: temporary directories left: %v", when, left)
				}
			}
			same("the good restore")
			for _, bad := range []struct {
				file string
				at   int
			}{{"model.bin", 100}, {"model.bin", 8<<20 + 5}, {"model.bin", 3<<23 + 1<<20 + 4}, {"model.bin", 2<<23 + 77}, {"shard-07.bin", 3}} {
				key := "checkpoints/000000000009/files/" + bad.file
				b := bytes.Clone(files[bad.file])
				b[bad.at] ^= 0x80
				if _, err := s.Put(ctx, key, bytes.NewReader(b)); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Restore(ctx, 9, out); !errors.Is(err, checkpoint.ErrCorrupt) {
					t.Fatalf("restore with byte %d of %s changed: %v, want ErrCorrupt", bad.at, bad.file, err)
				}
				same(fmt.Sprintf("after refusing byte %d of %s", bad.at, bad.file))
				if _, err := s.Put(ctx, key, bytes.NewReader(files[bad.file])); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
