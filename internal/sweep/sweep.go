// Package sweep reads sweep.yaml and expands its grid: which runs a
// `vastrun sweep` makes, each with its environment and its name. It only
// decides; the CLI runs the points, one run each.
//
// Contract: Load refuses a file that names no config, no budget, an empty
// grid, a grid key that is not an environment variable name, or more than
// MaxPoints combinations, and names every problem at once. Points is in a
// stable order (keys sorted, each key's values in their written order), so
// the same file always yields the same runs under the same names.
package sweep

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// MaxPoints bounds a grid's combinations; MaxConcurrency its runs at once.
const (
	MaxPoints      = 256
	MaxConcurrency = 64
)

// File is sweep.yaml.
type File struct {
	// Config is the run's config (train or ci), relative to sweep.yaml.
	Config string `yaml:"config"`
	// Concurrency bounds the runs at once (default 1).
	Concurrency int `yaml:"concurrency"`
	// BudgetUSD is one budget across every run of the sweep (required).
	BudgetUSD float64 `yaml:"budget_usd"`
	// Grid maps a parameter (an environment variable name) to its values;
	// the sweep runs every combination, each with those variables set.
	Grid map[string][]string `yaml:"grid"`
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`) })

// Load reads and checks path. Config comes back relative to the working
// directory and Concurrency at least 1. A missing file's error wraps
// fs.ErrNotExist.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse is Load on bytes already read from path.
func Parse(path string, b []byte) (*File, error) {
	var s File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var errs []string
	if s.Config == "" {
		errs = append(errs, "config is required: the run's config file (a train or ci config)")
	}
	if s.BudgetUSD <= 0 {
		errs = append(errs, "budget_usd is required: one budget, in $, across every run of the sweep")
	}
	if s.Concurrency < 0 || s.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Sprintf("concurrency %d must be from 1 to %d", s.Concurrency, MaxConcurrency))
	}
	if len(s.Grid) == 0 {
		errs = append(errs, "grid is required: parameter: [values...]")
	}
	n := 1
	for _, k := range sortedKeys(s.Grid) {
		vs := s.Grid[k]
		if !envName().MatchString(k) {
			errs = append(errs, fmt.Sprintf("grid key %q must be an environment variable name (A-Z, 0-9, _)", k))
		}
		if len(vs) == 0 {
			errs = append(errs, fmt.Sprintf("grid.%s has no values", k))
		}
		n *= max(len(vs), 1)
	}
	if n > MaxPoints {
		errs = append(errs, fmt.Sprintf("the grid has %d combinations; at most %d", n, MaxPoints))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", path, strings.Join(errs, "; "))
	}
	if !filepath.IsAbs(s.Config) {
		s.Config = filepath.Join(filepath.Dir(path), s.Config)
	}
	if s.Concurrency == 0 {
		s.Concurrency = 1
	}
	return &s, nil
}

// Points is the grid's combinations, in a stable order.
func (s *File) Points() []map[string]string {
	out := []map[string]string{{}}
	for _, k := range sortedKeys(s.Grid) {
		var next []map[string]string
		for _, p := range out {
			for _, v := range s.Grid[k] {
				q := map[string]string{k: v}
				for kk, vv := range p {
					q[kk] = vv
				}
				next = append(next, q)
			}
		}
		out = next
	}
	return out
}

var unsafeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-zA-Z0-9=._-]`) })

// PointName names a point for its evidence directory: key=value pairs,
// keys lower-cased and sorted, with anything but letters, digits and
// "=._-" (the pairs' separator included) replaced by _.
func PointName(p map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(p) {
		parts = append(parts, strings.ToLower(k)+"="+p[k])
	}
	return unsafeName().ReplaceAllString(strings.Join(parts, ","), "_")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
