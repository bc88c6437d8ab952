package sweep

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       *File    // nil: an error
		errs       []string // every problem is named
	}{
		{name: "minimal", yaml: "config: train.yaml\nbudget_usd: 5\ngrid:\n  LR: ['0.1']\n",
			want: &File{Config: filepath.Join("dir", "train.yaml"), Concurrency: 1, BudgetUSD: 5, Grid: map[string][]string{"LR": {"0.1"}}}},
		{name: "absolute config kept", yaml: "config: /abs/train.yaml\nconcurrency: 3\nbudget_usd: 20\ngrid:\n  SEED: ['1','2']\n",
			want: &File{Config: "/abs/train.yaml", Concurrency: 3, BudgetUSD: 20, Grid: map[string][]string{"SEED": {"1", "2"}}}},
		{name: "empty", yaml: "{}\n", errs: []string{"config is required", "budget_usd is required", "grid is required"}},
		{name: "bad keys and values", yaml: "config: t.yaml\nbudget_usd: 1\nconcurrency: 65\ngrid:\n  lr: ['1']\n  SEED: []\n",
			errs: []string{"concurrency 65 must be from 1 to 64", `grid key "lr" must be an environment variable name`, "grid.SEED has no values"}},
		{name: "negative concurrency", yaml: "config: t.yaml\nbudget_usd: 1\nconcurrency: -1\ngrid:\n  A: ['1']\n", errs: []string{"concurrency -1"}},
		{name: "too many points", yaml: "config: t.yaml\nbudget_usd: 1\ngrid:\n  A: [" + strings.Repeat("'x',", 16) + "'x']\n  B: [" + strings.Repeat("'y',", 15) + "'y']\n",
			errs: []string{"the grid has 272 combinations; at most 256"}},
		{name: "unknown key", yaml: "config: t.yaml\nbudget: 1\n", errs: []string{"field budget not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(filepath.Join("dir", "sweep.yaml"), []byte(tc.yaml))
			if tc.want != nil {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if !strings.HasPrefix(err.Error(), filepath.Join("dir", "sweep.yaml")+": ") {
				t.Errorf("error %q does not name the file", err)
			}
			for _, e := range tc.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q lacks %q", err, e)
				}
			}
		})
	}
}

func TestLoadMissingFileIsNotExist(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "sweep.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want fs.ErrNotExist", err)
	}
	p := filepath.Join(t.TempDir(), "sweep.yaml")
	os.WriteFile(p, []byte("config: t.yaml\nbudget_usd: 1\ngrid:\n  A: ['1']\n"), 0o644)
	if s, err := Load(p); err != nil || s.Config != filepath.Join(filepath.Dir(p), "t.yaml") {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestPointsAreEveryCombinationInAStableOrder(t *testing.T) {
	s := &File{Grid: map[string][]string{"SEED": {"1", "2", "3"}, "LR": {"0.1", "0.01"}}}
	want := []map[string]string{
		{"LR": "0.1", "SEED": "1"}, {"LR": "0.1", "SEED": "2"}, {"LR": "0.1", "SEED": "3"},
		{"LR": "0.01", "SEED": "1"}, {"LR": "0.01", "SEED": "2"}, {"LR": "0.01", "SEED": "3"},
	}
	for range 5 { // map order varies between runs; the points must not
		if got := s.Points(); !reflect.DeepEqual(got, want) {
			t.Fatalf("points %v, want %v", got, want)
		}
	}
}

func TestPointName(t *testing.T) {
	for _, tc := range []struct {
		p    map[string]string
		want string
	}{
		{map[string]string{"SEED": "1", "LR": "0.1"}, "lr=0.1_seed=1"},
		{map[string]string{"MODEL": "gpt2/small large"}, "model=gpt2_small_large"},
		{map[string]string{"A": "x;rm -rf"}, "a=x_rm_-rf"},
		{map[string]string{}, ""},
	} {
		if got := PointName(tc.p); got != tc.want {
			t.Errorf("PointName(%v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
