package teamstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/s3client"
)

// Memory is an in-process Backend for unit tests. Its server clock is
// Clock; Fault, when set, is asked before every request and a non-nil error
// fails it as an unreachable server would (nothing stored). IgnoreConditions
// makes it behave like the S3 servers that accept conditional headers and
// ignore them, so that tests can prove the Probe refuses such a server.
type Memory struct {
	Clock            clock.Clock
	Fault            func(op, key string) error
	IgnoreConditions bool

	mu   sync.Mutex
	objs map[string]Object
	n    int
}

// NewMemory returns an empty Memory backend on clk (the wall clock if nil).
func NewMemory(clk clock.Clock) *Memory {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Memory{Clock: clk, objs: map[string]Object{}}
}

var _ Backend = (*Memory)(nil)

func (m *Memory) URI() string { return "memory://" }

func (m *Memory) fault(op, key string) error {
	m.mu.Lock()
	f := m.Fault
	m.mu.Unlock()
	if f == nil {
		return nil
	}
	if err := f(op, key); err != nil {
		return fmt.Errorf("%s %s: %w: %v", op, key, ErrUnavailable, err) //nolint:errorlint // the class is ErrUnavailable; the cause is context only
	}
	return nil
}

// SetFault replaces Fault while requests may be in flight.
func (m *Memory) SetFault(f func(op, key string) error) {
	m.mu.Lock()
	m.Fault = f
	m.mu.Unlock()
}

func (m *Memory) Get(ctx context.Context, key string) (Object, time.Time, error) {
	if _, err := s3client.CleanKey(key); err != nil {
		return Object{}, time.Time{}, err
	}
	if err := m.fault("get", key); err != nil {
		return Object{}, time.Time{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.Clock.Now()
	o, ok := m.objs[key]
	if !ok {
		return Object{}, now, fmt.Errorf("get %s: %w", key, ErrNotExist)
	}
	o.Data = append([]byte(nil), o.Data...)
	return o, now, nil
}

func (m *Memory) put(key string, data []byte) string {
	m.n++
	sum := sha256.Sum256(fmt.Appendf(append([]byte(nil), data...), "\x00%d", m.n))
	etag := hex.EncodeToString(sum[:16])
	m.objs[key] = Object{Key: key, Data: append([]byte(nil), data...), ETag: etag, LastModified: m.Clock.Now()}
	return etag
}

func (m *Memory) PutIfAbsent(ctx context.Context, key string, data []byte) (string, error) {
	if _, err := s3client.CleanKey(key); err != nil {
		return "", err
	}
	if err := m.fault("create", key); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok && !m.IgnoreConditions {
		return "", fmt.Errorf("create %s: %w", key, ErrPrecondition)
	}
	return m.put(key, data), nil
}

func (m *Memory) PutIfMatch(ctx context.Context, key string, data []byte, etag string) (string, error) {
	if _, err := s3client.CleanKey(key); err != nil {
		return "", err
	}
	if err := m.fault("replace", key); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.objs[key]; (!ok || o.ETag != etag) && !m.IgnoreConditions {
		return "", fmt.Errorf("replace %s: %w", key, ErrPrecondition)
	}
	return m.put(key, data), nil
}

func (m *Memory) List(ctx context.Context, prefix string) ([]string, error) {
	if err := m.fault("list", prefix); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}
