package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/storage"
)

func setup(t *testing.T) (checkpoint.Store, string) {
	s, err := storage.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint.Store{S: s}, t.TempDir()
}

func writeStep(t *testing.T, dir string, step string, complete bool) {
	d := filepath.Join(dir, step)
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "state.json"), []byte(`{"step":`+step+`}`), 0o644)
	if complete {
		os.WriteFile(filepath.Join(d, checkpoint.CompleteMarker), nil, 0o644)
	}
}

func TestOnceCommitsOnlyCompleteCheckpointsAndPrunes(t *testing.T) {
	cs, dir := setup(t)
	writeStep(t, dir, "100", true)
	writeStep(t, dir, "200", true)
	writeStep(t, dir, "300", true)
	writeStep(t, dir, "400", false) // still being written
	status := filepath.Join(t.TempDir(), "agent.json")
	if err := Watch(context.Background(), Options{Checkpoints: cs, CheckpointDir: dir, Keep: 2, StatusFile: status, Once: true}); err != nil {
		t.Fatal(err)
	}
	list, _ := cs.Committed(context.Background())
	if len(list) != 2 || list[0].Step != 300 || list[1].Step != 200 {
		t.Fatalf("committed: %+v", list)
	}
	b, _ := os.ReadFile(status)
	st, err := ReadStatus(b)
	if err != nil || st.LastStep != 300 || st.LastSHA256 == "" {
		t.Fatalf("status: %s %v", b, err)
	}
}

func TestDeadManSwitchFiresAfterTTL(t *testing.T) {
	cs, dir := setup(t)
	clk := clock.NewFake(time.Now())
	hb := filepath.Join(t.TempDir(), "heartbeat")
	os.WriteFile(hb, nil, 0o644)
	var destroyed atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- Watch(context.Background(), Options{Checkpoints: cs, CheckpointDir: dir, HeartbeatFile: hb, TTL: time.Minute,
			Poll: 10 * time.Second, Clock: clk, SelfDestroy: func(context.Context) (bool, error) { destroyed.Store(true); return true, nil }})
	}()
	for clk.Waiters() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(50 * time.Second)
	waitWaiter(clk)
	if destroyed.Load() {
		t.Fatal("fired before the TTL")
	}
	clk.Advance(20 * time.Second) // 70 s since the last heartbeat
	select {
	case err := <-done:
		if !errors.Is(err, ErrSelfDestroyed) || !destroyed.Load() || !strings.Contains(err.Error(), "no controller heartbeat") {
			t.Fatalf("%v destroyed=%v", err, destroyed.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dead-man switch never fired")
	}
}

func TestDeadlineFires(t *testing.T) {
	cs, dir := setup(t)
	clk := clock.NewFake(time.Now())
	done := make(chan error, 1)
	go func() {
		done <- Watch(context.Background(), Options{Checkpoints: cs, CheckpointDir: dir, Deadline: clk.Now().Add(time.Hour), Poll: time.Minute, Clock: clk,
			SelfDestroy: func(context.Context) (bool, error) { return true, nil }})
	}()
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if !errors.Is(err, ErrSelfDestroyed) || !strings.Contains(err.Error(), "deadline") || i < 60 {
				t.Fatalf("after %d minutes: %v", i, err)
			}
			return
		default:
		}
		if i > 70 {
			t.Fatal("the deadline never fired")
		}
		waitWaiter(clk)
		clk.Advance(time.Minute)
	}
}

func waitWaiter(clk *clock.Fake) {
	for i := 0; i < 200 && clk.Waiters() == 0; i++ {
		time.Sleep(time.Millisecond)
	}
}

func TestQuietDirectoriesCountAsComplete(t *testing.T) {
	cs, dir := setup(t)
	writeStep(t, dir, "100", false)
	writeStep(t, dir, "200", false)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "100", "state.json"), old, old) // quiet for an hour
	if err := Watch(context.Background(), Options{Checkpoints: cs, CheckpointDir: dir, Quiet: time.Minute, Once: true}); err != nil {
		t.Fatal(err)
	}
	list, _ := cs.Committed(context.Background())
	if len(list) != 1 || list[0].Step != 100 {
		t.Fatalf("only the quiet directory should commit: %+v", list)
	}
}
