package storage_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/storage"
)

// BenchmarkS3VersusAWSCLI uploads and downloads the same 256 MiB file with
// vastrun's S3 store and with `aws s3 cp`, against the same real S3 server
// (VASTRUN_TEST_S3_ENDPOINT), and reports both throughputs and their ratio.
// vastrun runs in-process here and aws as a process, which credits vastrun
// with aws's start-up (~0.4 s): the fair, whole-process comparison is
// scripts/bench-storage.sh.
//
//	VASTRUN_TEST_S3_ENDPOINT=http://127.0.0.1:5055 go test ./internal/storage -run '^$' -bench S3VersusAWSCLI -benchtime 3x
func BenchmarkS3VersusAWSCLI(b *testing.B) {
	endpoint := os.Getenv("VASTRUN_TEST_S3_ENDPOINT")
	if endpoint == "" {
		b.Skip("set VASTRUN_TEST_S3_ENDPOINT")
	}
	if _, err := exec.LookPath("aws"); err != nil {
		b.Skip("aws CLI not installed")
	}
	os.Setenv("AWS_ACCESS_KEY_ID", "testkey")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "testsecret")
	os.Setenv("AWS_DEFAULT_REGION", "us-east-1")
	const size = 256 << 20
	dir := b.TempDir()
	src := filepath.Join(dir, "ckpt.bin")
	f, _ := os.Create(src)
	io.CopyN(f, rand.Reader, size)
	f.Close()
	threads := 0 // the production default
	if v := os.Getenv("BENCH_THREADS"); v != "" {
		fmt.Sscan(v, &threads)
	}
	var part int64 // 0: the production default
	if v := os.Getenv("BENCH_PART_MIB"); v != "" {
		fmt.Sscan(v, &part)
		part <<= 20
	}
	yes := true
	s, err := storage.Open("s3://vastrun-bench/prefix", storage.Options{Endpoint: endpoint, Region: "us-east-1", PathStyle: &yes,
		Threads: threads, PartSize: part, AccessKey: "testkey", SecretKey: "testsecret"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.(*storage.S3Store).EnsureBucket(ctx); err != nil {
		b.Fatal(err)
	}
	var ours, theirs, oursGet, theirsGet time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := storage.PutFile(ctx, s, "bench/ckpt.bin", src); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(t0)

		t0 = time.Now()
		// A restore verifies: GetFile hashes what it writes.
		if _, err := storage.GetFile(ctx, s, "bench/ckpt.bin", filepath.Join(dir, "restored.bin"), size); err != nil {
			b.Fatal(err)
		}
		oursGet += time.Since(t0)

		t0 = time.Now()
		if out, err := exec.Command("aws", "--endpoint-url", endpoint, "s3", "cp", "--quiet", src, "s3://vastrun-bench/cli/ckpt.bin").CombinedOutput(); err != nil {
			b.Fatalf("aws s3 cp up: %v %s", err, out)
		}
		theirs += time.Since(t0)
		t0 = time.Now()
		if out, err := exec.Command("aws", "--endpoint-url", endpoint, "s3", "cp", "--quiet", "s3://vastrun-bench/cli/ckpt.bin", filepath.Join(dir, "cli.bin")).CombinedOutput(); err != nil {
			b.Fatalf("aws s3 cp down: %v %s", err, out)
		}
		theirsGet += time.Since(t0)
	}
	mb := float64(size>>20) * float64(b.N)
	b.ReportMetric(mb/ours.Seconds(), "MiB/s-vastrun-up")
	b.ReportMetric(mb/theirs.Seconds(), "MiB/s-awscli-up")
	b.ReportMetric(theirs.Seconds()/ours.Seconds(), "up-speedup-vs-awscli")
	b.ReportMetric(mb/oursGet.Seconds(), "MiB/s-vastrun-restore")
	b.ReportMetric(mb/theirsGet.Seconds(), "MiB/s-awscli-down")
	b.ReportMetric(theirsGet.Seconds()/oursGet.Seconds(), "down-speedup-vs-awscli")
}
