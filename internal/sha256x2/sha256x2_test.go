package sha256x2

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
)

// randBytes: n bytes from a ChaCha8 stream seeded from r (a whole-slice
// Read, so megabytes stay cheap under -race).
func randBytes(r *rand.Rand, n int) []byte {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(r.Uint32())
	}
	b := make([]byte, n)
	rand.NewChaCha8(seed).Read(b)
	return b
}

func want(p []byte) []byte {
	s := sha256.Sum256(p)
	return s[:]
}

// bothPaths runs f with the SHA-NI code and with the crypto/sha256 wrapper,
// so the buffering logic and the fallback are both checked here.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	t.Run("sha", func(t *testing.T) {
		if !haveSHA {
			t.Skip("no SHA extensions on this machine (TestInterleavedOnSHAMachines fails where they are expected)")
		}
		f(t)
	})
	t.Run("std", func(t *testing.T) {
		old := useSHA
		useSHA = false
		defer func() { useSHA = old }()
		f(t)
	})
}

func TestVectors(t *testing.T) {
	cases := []struct{ in, sum string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{strings.Repeat("a", 1000000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
	}
	bothPaths(t, func(t *testing.T) {
		for _, c := range cases {
			d := New()
			d.Write([]byte(c.in))
			if got := hex.EncodeToString(d.Sum(nil)); got != c.sum {
				t.Errorf("SHA-256 of %d bytes %.8q...: %s, want %s", len(c.in), c.in, got, c.sum)
			}
			// The same messages through Write2, paired with each other.
			a, b := New(), New()
			Write2(a, []byte(c.in), b, []byte(cases[1].in))
			if got := hex.EncodeToString(a.Sum(nil)); got != c.sum {
				t.Errorf("Write2: SHA-256 of %d bytes: %s, want %s", len(c.in), got, c.sum)
			}
			if got := hex.EncodeToString(b.Sum(nil)); got != cases[1].sum {
				t.Errorf("Write2 partner: %s, want %s", got, cases[1].sum)
			}
		}
	})
}

// TestBlockFunctions checks block1 and block2 directly (the 1-way and 2-way
// paths) against crypto/sha256 on whole-block messages: 0..40 blocks and
// around the chunk size of one assembly call.
func TestBlockFunctions(t *testing.T) {
	if !haveSHA {
		t.Skip("no SHA extensions on this machine")
	}
	r := rand.New(rand.NewPCG(1, 2))
	counts := []int{chunk/BlockSize - 1, chunk / BlockSize, chunk/BlockSize + 1, 2*chunk/BlockSize + 7}
	for n := 0; n <= 40; n++ {
		counts = append(counts, n)
	}
	for _, n := range counts {
		p1 := randBytes(r, n*BlockSize)
		p2 := randBytes(r, n*BlockSize)
		one := New()
		blocks1(&one.h, p1)
		one.len = uint64(len(p1))
		if got := one.Sum(nil); !bytes.Equal(got, want(p1)) {
			t.Fatalf("blocks1, %d blocks: %x, want %x", n, got, want(p1))
		}
		a, b := New(), New()
		blocks2(&a.h, &b.h, p1, p2)
		a.len, b.len = uint64(len(p1)), uint64(len(p2))
		if got := a.Sum(nil); !bytes.Equal(got, want(p1)) {
			t.Fatalf("blocks2 first, %d blocks: %x, want %x", n, got, want(p1))
		}
		if got := b.Sum(nil); !bytes.Equal(got, want(p2)) {
			t.Fatalf("blocks2 second, %d blocks: %x, want %x", n, got, want(p2))
		}
	}
}

// TestInterleavedOnSHAMachines: where the CPU has the SHA extensions the
// two-way code must run; a detection bug would otherwise pass every other
// test on the slow path.
func TestInterleavedOnSHAMachines(t *testing.T) {
	if runtime.GOARCH != "amd64" || !assembly {
		if Interleaved() {
			t.Fatalf("Interleaved() on %s (purego or not amd64), which has no assembly", runtime.GOARCH)
		}
		return
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo to tell whether the CPU has SHA-NI: %v", err)
	}
	hasNI := false
	for _, line := range strings.Split(string(info), "\n") {
		if strings.HasPrefix(line, "flags") {
			for _, f := range strings.Fields(line) {
				if f == "sha_ni" {
					hasNI = true
				}
			}
		}
	}
	if hasNI != Interleaved() {
		t.Fatalf("/proc/cpuinfo says sha_ni=%v, Interleaved()=%v", hasNI, Interleaved())
	}
	if hasNI {
		if d := New(); d.std != nil {
			t.Fatal("New() wraps crypto/sha256 on a machine with SHA-NI")
		}
	}
}

func TestLengths(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		lengths := []int{}
		for n := 0; n <= 4*BlockSize+1; n++ {
			lengths = append(lengths, n)
		}
		for range 100 {
			lengths = append(lengths, r.IntN(8<<10))
		}
		lengths = append(lengths, 1<<20, 3<<20+17)
		for _, n := range lengths {
			p := randBytes(r, n)
			d := New()
			d.Write(p)
			if got := d.Sum(nil); !bytes.Equal(got, want(p)) {
				t.Fatalf("%d bytes in one Write: %x, want %x", n, got, want(p))
			}
		}
	})
}

func TestWrite2RandomSplits(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for i := range 300 {
			n1, n2 := r.IntN(6<<10), r.IntN(6<<10)
			if i%50 == 0 {
				n1, n2 = 1<<20+r.IntN(1<<20), r.IntN(3<<20)
			}
			p1, p2 := randBytes(r, n1), randBytes(r, n2)
			checkSplits(t, r, p1, p2)
		}
	})
}

func checkSplits(t *testing.T, r *rand.Rand, p1, p2 []byte) {
	t.Helper()
	d1, d2 := New(), New()
	q1, q2 := p1, p2
	for len(q1) > 0 || len(q2) > 0 || r.IntN(3) == 0 {
		a, b := cut(r, &q1), cut(r, &q2)
		switch r.IntN(5) {
		case 0:
			d1.Write(a)
			d2.Write(b)
		case 1:
			Write2(d2, b, d1, a)
		default:
			Write2(d1, a, d2, b)
		}
		if r.IntN(4) == 0 {
			d1.Sum(nil) // must not disturb the state checked below
			d2.Sum([]byte("prefix"))
		}
	}
	if got := d1.Sum(nil); !bytes.Equal(got, want(p1)) {
		t.Fatalf("first of %d and %d bytes: %x, want %x", len(p1), len(p2), got, want(p1))
	}
	if got := d2.Sum([]byte("x")); !bytes.Equal(got[1:], want(p2)) || got[0] != 'x' {
		t.Fatalf("second of %d and %d bytes: %x, want x%x", len(p1), len(p2), got, want(p2))
	}
}

// cut takes a random piece off the front of *p: under a block, a few
// blocks, whole blocks, large, or empty.
func cut(r *rand.Rand, p *[]byte) []byte {
	var n int
	switch r.IntN(5) {
	case 0:
		n = r.IntN(BlockSize)
	case 1:
		n = r.IntN(4 * BlockSize)
	case 2:
		n = r.IntN(256 << 10)
	case 3:
		n = BlockSize * r.IntN(8)
	default:
		n = 0
	}
	n = min(n, len(*p))
	a := (*p)[:n]
	*p = (*p)[n:]
	return a
}

func TestWrite2Edges(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		long := randBytes(r, 20*BlockSize+5)
		for _, pre1 := range []int{0, 1, 63} {
			for _, pre2 := range []int{0, 1, 32, 63} {
				for _, n1 := range []int{0, 1, 63, 64, 65, 640, 645} {
					for _, n2 := range []int{0, 62, 64, 128, 129, 645} {
						a := long[:pre1+n1]
						b := long[len(long)-pre2-n2:]
						d1, d2 := New(), New()
						d1.Write(a[:pre1]) // a pending partial block on either side
						d2.Write(b[:pre2])
						Write2(d1, a[pre1:], d2, b[pre2:])
						if got := d1.Sum(nil); !bytes.Equal(got, want(a)) {
							t.Fatalf("pending %d + %d bytes (partner %d+%d): %x, want %x", pre1, n1, pre2, n2, got, want(a))
						}
						if got := d2.Sum(nil); !bytes.Equal(got, want(b)) {
							t.Fatalf("partner pending %d + %d bytes: %x, want %x", pre2, n2, got, want(b))
						}
					}
				}
			}
		}
		// The same digest twice is d.Write(p1) then d.Write(p2).
		d := New()
		Write2(d, long[:100], d, long[100:])
		if got := d.Sum(nil); !bytes.Equal(got, want(long)) {
			t.Fatalf("Write2(d, d): %x, want %x", got, want(long))
		}
		// Reset starts over.
		d.Reset()
		d.Write([]byte("abc"))
		if got := d.Sum(nil); !bytes.Equal(got, want([]byte("abc"))) {
			t.Fatalf("after Reset: %x", got)
		}
		if d.Size() != sha256.Size || d.BlockSize() != sha256.BlockSize {
			t.Fatalf("Size %d BlockSize %d", d.Size(), d.BlockSize())
		}
	})
}

// Mixed: a Digest made with the extensions off (crypto/sha256 inside) paired
// with one made with them on.
func TestWrite2MixedModes(t *testing.T) {
	if !haveSHA {
		t.Skip("no SHA extensions on this machine")
	}
	r := rand.New(rand.NewPCG(9, 10))
	p1, p2 := randBytes(r, 5000), randBytes(r, 7000)
	fast := New()
	useSHA = false
	slow := New()
	useSHA = true
	Write2(fast, p1, slow, p2)
	if got := fast.Sum(nil); !bytes.Equal(got, want(p1)) {
		t.Fatalf("fast digest: %x, want %x", got, want(p1))
	}
	if got := slow.Sum(nil); !bytes.Equal(got, want(p2)) {
		t.Fatalf("crypto/sha256 digest: %x, want %x", got, want(p2))
	}
}

// Write2 promises no allocation: the restore calls it per part.
func TestWrite2DoesNotAllocate(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		p1, p2 := make([]byte, 1000), make([]byte, 3000)
		d1, d2 := New(), New()
		if n := testing.AllocsPerRun(20, func() { Write2(d1, p1, d2, p2) }); n != 0 {
			t.Fatalf("Write2 allocates %v times per call", n)
		}
	})
}

func FuzzWrite2(f *testing.F) {
	f.Add([]byte("abc"), []byte(""), uint16(0), uint16(0), uint64(1))
	f.Add(bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 700), uint16(3), uint16(64), uint64(2))
	f.Fuzz(func(t *testing.T, p1, p2 []byte, pre1, pre2 uint16, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		checkSplits(t, r, p1, p2)
		// And one plain Write2 after pending prefixes of the fuzzed sizes.
		n1, n2 := int(pre1)%(len(p1)+1), int(pre2)%(len(p2)+1)
		d1, d2 := New(), New()
		d1.Write(p1[:n1])
		d2.Write(p2[:n2])
		Write2(d1, p1[n1:], d2, p2[n2:])
		if got := d1.Sum(nil); !bytes.Equal(got, want(p1)) {
			t.Fatalf("first: %x, want %x", got, want(p1))
		}
		if got := d2.Sum(nil); !bytes.Equal(got, want(p2)) {
			t.Fatalf("second: %x, want %x", got, want(p2))
		}
	})
}

const benchSize = 256 << 10

// cpuRate runs the benchmark loop on one locked thread and reports, besides
// the wall-clock MB/s of SetBytes, "cpu-MB/s": bytes per second of that
// thread's CPU time, which a loaded machine does not distort.
func cpuRate(b *testing.B, bytesPerOp int, op func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.SetBytes(int64(bytesPerOp))
	c0, ok := threadCPU()
	for b.Loop() {
		op()
	}
	c1, _ := threadCPU()
	if ok && c1 > c0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/(c1-c0).Seconds()/1e6, "cpu-MB/s")
	}
}

func BenchmarkWrite(b *testing.B) {
	p := make([]byte, benchSize)
	d := New()
	cpuRate(b, benchSize, func() { d.Write(p) })
}

func BenchmarkWrite2(b *testing.B) {
	p1, p2 := make([]byte, benchSize), make([]byte, benchSize)
	d1, d2 := New(), New()
	cpuRate(b, 2*benchSize, func() { Write2(d1, p1, d2, p2) })
}

func BenchmarkStdlib(b *testing.B) {
	p := make([]byte, benchSize)
	d := sha256.New()
	cpuRate(b, benchSize, func() { d.Write(p) })
}
