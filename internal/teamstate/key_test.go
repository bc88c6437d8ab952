package teamstate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/vastrun/vastrun/internal/s3client"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Team state takes keys by the one rule of s3client.CleanKey, the same as
// checkpoint storage.
func TestStateRefusesKeysStorageRefuses(t *testing.T) {
	l, err := teamstate.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.PutIfAbsent(ctx, "runs/a/lease.json", []byte("{}")); err != nil {
		t.Fatalf("a relative key: %v", err)
	}
	for _, key := range []string{"/runs/a/lease.json", "runs/a/", "", "runs/../x", "runs//x", "./x"} {
		if _, err := l.PutIfAbsent(ctx, key, []byte("{}")); !errors.Is(err, s3client.ErrBadKey) {
			t.Errorf("PutIfAbsent(%q) = %v, want ErrBadKey", key, err)
		}
	}
}
