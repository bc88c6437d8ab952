package cli

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The ops commands in the gh shape: each table checks only the parsing,
// captured through runF — no simulator, no network, no state directory.

func opsFactory() *Factory {
	return &Factory{IO: &IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}, Getenv: func(string) string { return "" }}
}

func TestNewCmdDown(t *testing.T) {
	for _, tc := range []struct {
		args    string
		want    DownOptions
		wantErr string
	}{
		{args: "--yes", want: DownOptions{Settle: 20 * time.Second}},
		{args: "--instance 7 --instance 8 --yes", want: DownOptions{Instances: []int64{7, 8}, Settle: 20 * time.Second}},
		{args: "--label vastrun-x --settle 1s", want: DownOptions{Label: "vastrun-x", Settle: time.Second}},
		{args: "--all --yes --state-dir st", want: DownOptions{All: true, Settle: 20 * time.Second}},
		{args: "--run mx1abc", want: DownOptions{Settle: 20 * time.Second}},
		{args: "--instance 0", wantErr: "--instance 0 is not an instance id"},
		{args: "--settle -1s", wantErr: "--settle -1s is negative"},
		{args: "extra", wantErr: "unknown command"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var got *DownOptions
			cmd := NewCmdDown(opsFactory(), func(_ context.Context, o *DownOptions) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tc.args))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if got != nil {
					t.Fatal("runF was called despite the bad input")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Instances, tc.want.Instances) || got.Label != tc.want.Label || got.Settle != tc.want.Settle || got.All != tc.want.All {
				t.Fatalf("options %+v, want %+v", got, tc.want)
			}
			if strings.Contains(tc.args, "--yes") != got.Workflow.Yes {
				t.Fatalf("--yes: %v", got.Workflow.Yes)
			}
			if strings.Contains(tc.args, "--run") && got.Workflow.RunID != "mx1abc" {
				t.Fatalf("--run: %q", got.Workflow.RunID)
			}
			if strings.Contains(tc.args, "--state-dir") && got.Workflow.StateDir != "st" {
				t.Fatalf("--state-dir: %q", got.Workflow.StateDir)
			}
		})
	}
}

func TestNewCmdStatus(t *testing.T) {
	var got *StatusOptions
	cmd := NewCmdStatus(opsFactory(), func(_ context.Context, o *StatusOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--run", "mx1abc", "--offline", "--state-dir", "st", "-f", "v.yaml"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !got.Offline || got.Workflow.RunID != "mx1abc" || got.Workflow.StateDir != "st" || got.Workflow.ConfigPath != "v.yaml" {
		t.Fatalf("options %+v", got)
	}
}

func TestNewCmdReap(t *testing.T) {
	for _, tc := range []struct {
		args    string
		want    ReapOptions
		wantErr string
	}{
		{args: "", want: ReapOptions{Prefix: "vastrun-"}},
		{args: "--label-prefix vastrun-acme- --yes", want: ReapOptions{Prefix: "vastrun-acme-", Yes: true}},
		{args: "--at 2026-12-24T00:00:00Z", want: ReapOptions{Prefix: "vastrun-", At: "2026-12-24T00:00:00Z"}},
		{args: "--at tomorrow", wantErr: `--at "tomorrow"`},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var got *ReapOptions
			cmd := NewCmdReap(opsFactory(), func(_ context.Context, o *ReapOptions) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tc.args))
			err := cmd.Execute()
			if tc.wantErr != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.wantErr) || got != nil {
					t.Fatalf("err %v (runF called: %v), want a usage error %q", err, got != nil, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Prefix != tc.want.Prefix || got.Yes != tc.want.Yes || got.At != tc.want.At {
				t.Fatalf("options %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNewCmdDoctor(t *testing.T) {
	for _, args := range [][]string{{}, {"--strict"}} {
		var got *DoctorOptions
		cmd := NewCmdDoctor(opsFactory(), func(_ context.Context, o *DoctorOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.Strict != (len(args) == 1) {
			t.Fatalf("%v: strict %v", args, got.Strict)
		}
	}
}
