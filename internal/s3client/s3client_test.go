package s3client_test

import (
	"errors"
	"testing"

	"github.com/vastrun/vastrun/internal/s3client"
)

func TestNew(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	yes := true
	for _, c := range []struct {
		name     string
		cfg      s3client.Config
		endpoint string
		secure   bool
	}{
		{"default is AWS", s3client.Config{Getenv: env(nil)}, "https://s3.amazonaws.com", true},
		{"S3 endpoint variable first", s3client.Config{Getenv: env(map[string]string{"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_ENDPOINT_URL": "http://other:1"})}, "http://127.0.0.1:9000", false},
		{"general endpoint variable", s3client.Config{Getenv: env(map[string]string{"AWS_ENDPOINT_URL": "https://minio.example:9000/ignored/path"})}, "https://minio.example:9000", true},
		{"given endpoint wins", s3client.Config{Endpoint: "http://localhost:7070", PathStyle: &yes, AccessKey: "k", SecretKey: "s", Getenv: env(map[string]string{"AWS_ENDPOINT_URL_S3": "http://other:1"})}, "http://localhost:7070", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s3client.New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got.Endpoint != c.endpoint || got.Secure != c.secure || got.Client == nil {
				t.Fatalf("endpoint %q secure %v, want %q %v", got.Endpoint, got.Secure, c.endpoint, c.secure)
			}
		})
	}
	for _, bad := range []string{"ftp://host", "127.0.0.1:9000", "http://", "::"} {
		if _, err := s3client.New(s3client.Config{Endpoint: bad}); !errors.Is(err, s3client.ErrEndpoint) {
			t.Errorf("endpoint %q: %v, want ErrEndpoint", bad, err)
		}
	}
}

func TestCleanKey(t *testing.T) {
	if k, err := s3client.CleanKey("runs/a/lease.json"); err != nil || k != "runs/a/lease.json" {
		t.Fatalf("CleanKey(relative) = %q, %v", k, err)
	}
	for _, key := range []string{"", "/a", "a/", "a//b", "a/./b", "../a"} {
		if _, err := s3client.CleanKey(key); !errors.Is(err, s3client.ErrBadKey) {
			t.Errorf("CleanKey(%q) = %v, want ErrBadKey", key, err)
		}
	}
}
