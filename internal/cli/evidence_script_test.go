package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/vastrun/vastrun/internal/storage"
)

// cmdS3 uses the real S3 server .ci/run starts (moto):
//
//	s3 bucket NAME           create a fresh bucket; sets $BUCKET and the
//	                         AWS_* variables vastrun reads
//	s3 list URI              print the keys under URI, one a line
//	s3 fetch URI DIR         download every object under URI into DIR
//
// A scenario guards itself with `[!s3] skip`; the condition is true when
// VASTRUN_TEST_S3_ENDPOINT is set, and when VASTRUN_TEST_S3_REQUIRED is set
// (then the commands fail for want of the server: CI never skips it).
func cmdS3(ts *testscript.TestScript, neg bool, args []string) {
	endpoint := os.Getenv("VASTRUN_TEST_S3_ENDPOINT")
	if len(args) < 2 {
		ts.Fatalf("usage: s3 bucket NAME | s3 list URI | s3 fetch URI DIR")
	}
	if endpoint == "" {
		ts.Fatalf("no real S3 server: set VASTRUN_TEST_S3_ENDPOINT (.ci/run starts moto)")
	}
	env := map[string]string{"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testkey", "AWS_SECRET_ACCESS_KEY": "testsecret",
		"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_S3_FORCE_PATH_STYLE": "true"}
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch args[0] {
	case "bucket":
		bucket := fmt.Sprintf("%s-%d", args[1], time.Now().UnixNano())
		st, err := storage.Open("s3://"+bucket+"/x", storage.Options{Getenv: getenv})
		ts.Check(err)
		ts.Check(st.(*storage.S3Store).EnsureBucket(ctx))
		for k, v := range env {
			ts.Setenv(k, v)
		}
		ts.Setenv("BUCKET", bucket)
	case "list": // the keys under URI, one a line (none: nothing printed)
		yes := true
		st, err := storage.Open(args[1], storage.Options{Endpoint: endpoint, Region: "us-east-1", PathStyle: &yes, AccessKey: "testkey", SecretKey: "testsecret"})
		ts.Check(err)
		objs, err := st.List(ctx, "")
		ts.Check(err)
		for _, o := range objs {
			fmt.Fprintln(ts.Stdout(), o.Key)
		}
	case "fetch":
		if len(args) != 3 {
			ts.Fatalf("usage: s3 fetch URI DIR")
		}
		yes := true
		st, err := storage.Open(args[1], storage.Options{Endpoint: endpoint, Region: "us-east-1", PathStyle: &yes, AccessKey: "testkey", SecretKey: "testsecret"})
		ts.Check(err)
		objs, err := st.List(ctx, "")
		ts.Check(err)
		if len(objs) == 0 {
			ts.Fatalf("nothing under %s", args[1])
		}
		for _, o := range objs {
			dst := filepath.Join(ts.MkAbs(args[2]), filepath.FromSlash(strings.TrimPrefix(o.Key, "/")))
			ts.Check(os.MkdirAll(filepath.Dir(dst), 0o755))
			r, err := st.Get(ctx, o.Key)
			ts.Check(err)
			b, err := io.ReadAll(r)
			r.Close()
			ts.Check(err)
			ts.Check(os.WriteFile(dst, b, 0o644))
		}
	default:
		ts.Fatalf("usage: s3 bucket NAME | s3 list URI | s3 fetch URI DIR")
	}
}

// scriptCondition answers the scenarios' custom conditions:
//
//	[s3]      a real S3 server is there, or required (see cmdS3)
//	[podman]  VASTRUN_TEST_PODMAN=required (.ci/run sets it once Podman
//	          has run a container; else it prints why Podman cannot run)
func scriptCondition(cond string) (bool, error) {
	switch cond {
	case "s3":
		// A required server that is missing fails the script rather
		// than skipping it.
		if os.Getenv("VASTRUN_TEST_S3_ENDPOINT") == "" && os.Getenv("VASTRUN_TEST_S3_REQUIRED") != "" {
			return false, fmt.Errorf("VASTRUN_TEST_S3_REQUIRED is set but VASTRUN_TEST_S3_ENDPOINT is not")
		}
		return os.Getenv("VASTRUN_TEST_S3_ENDPOINT") != "", nil
	case "podman":
		return os.Getenv("VASTRUN_TEST_PODMAN") == "required", nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}

// cmdRepoCopy copies files or directories of this repository into the
// script's work directory, at the same relative path: repocopy PATH...
func cmdRepoCopy(ts *testscript.TestScript, neg bool, args []string) {
	for _, rel := range args {
		src := filepath.Join("..", "..", filepath.FromSlash(rel)) // the test runs in internal/cli
		ts.Check(filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			r, _ := filepath.Rel(src, p)
			dst := filepath.Join(ts.MkAbs(rel), r)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.WriteFile(dst, b, fi.Mode().Perm())
		}))
	}
}
