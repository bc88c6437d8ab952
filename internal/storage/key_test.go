package storage_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/s3client"
	"github.com/vastrun/vastrun/internal/storage"
)

// Checkpoint storage takes keys by the one rule of s3client.CleanKey, the
// same as team state: a leading "/" is refused, not trimmed into "a".
func TestStoreRefusesKeysTeamStateRefuses(t *testing.T) {
	s, err := storage.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "runs/a/obj", strings.NewReader("x")); err != nil {
		t.Fatalf("a relative key: %v", err)
	}
	for _, key := range []string{"/runs/a/obj", "runs/a/", "", "runs/../x", "runs//x", "./x"} {
		if _, err := s.Put(ctx, key, strings.NewReader("x")); !errors.Is(err, s3client.ErrBadKey) {
			t.Errorf("Put(%q) = %v, want ErrBadKey", key, err)
		}
	}
}
