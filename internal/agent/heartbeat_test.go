package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestBeatTouchesAndReportsThePreviousAge(t *testing.T) {
	home := t.TempDir()
	l, err := NewLayout(home)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(l.Abs(Heartbeat)), 0o755)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	first := Beat(l, t0)
	if first.PreviousAgeSeconds != nil || first.Error != "" {
		t.Fatalf("first beat: %+v", first)
	}
	second := Beat(l, t0.Add(30*time.Second))
	if second.PreviousAgeSeconds == nil || *second.PreviousAgeSeconds != 30 {
		t.Fatalf("second beat: %+v", second)
	}
	fi, err := os.Stat(l.Abs(Heartbeat))
	if err != nil || !fi.ModTime().Equal(t0.Add(30*time.Second)) {
		t.Fatalf("heartbeat file: %v %v", fi, err)
	}
	b, _ := json.Marshal(second)
	if _, err := DecodeHeartbeat(b); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeHeartbeatRefusesOtherSchemasAndFailedWrites(t *testing.T) {
	for _, doc := range []string{
		`{"schema":"vastrun.agent.status","schema_version":1}`,
		`{"schema":"vastrun.agent.heartbeat","schema_version":2}`,
		`not json`,
	} {
		if _, err := DecodeHeartbeat([]byte(doc)); !errors.Is(err, ErrSchema) {
			t.Errorf("%s: %v, want ErrSchema", doc, err)
		}
	}
	if _, err := DecodeHeartbeat([]byte(`{"schema":"vastrun.agent.heartbeat","schema_version":1,"error":"read-only file system"}`)); err == nil {
		t.Error("a heartbeat the agent could not write was accepted")
	}
}
