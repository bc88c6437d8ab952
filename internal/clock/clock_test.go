package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFakeFiresOnlyWhenDue(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	ch := f.After(10 * time.Second)
	f.Advance(9 * time.Second)
	select {
	case <-ch:
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Second)
	select {
	case got := <-ch:
		if !got.Equal(time.Unix(1010, 0)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("timer did not fire when due")
	}
	if f.Waiters() != 0 {
		t.Fatalf("waiters = %d", f.Waiters())
	}
}

func TestSleepHonoursCancel(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, f, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on cancelled ctx = %v", err)
	}
}

func TestScaledRunsFaster(t *testing.T) {
	start := time.Unix(0, 0)
	s := NewScaled(start, 1000)
	<-s.After(2 * time.Second) // 2 ms of wall time
	if got := s.Now().Sub(start); got < 2*time.Second {
		t.Fatalf("scaled clock advanced only %v", got)
	}
}
