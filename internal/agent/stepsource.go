package agent

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Without train.step_from a snapshot's step is read from the checkpoint
// itself where it can be, in this order: the file's name (only the part a
// wildcard of train.checkpoint_file matched: out/ckpt_*.pt names ckpt_500.pt
// 500, a fixed name names nothing), a JSON object's top-level key, a
// torch.save (or any pickle) key; else a counter. The key is the first of
// stepKeys the file holds.
var stepKeys = []string{"iter_num", "global_step", "iteration", "iter", "step"}

// Step sources, as the agent log, the status and the receipt name them.
const (
	SourceLog     = "log"       // train.step_from over the workload's log
	SourceName    = "file name" // digits a wildcard matched
	SourceJSON    = "json key"  // + " NAME"
	SourcePickle  = "torch.save key"
	SourceCounter = "counter"
)

// maxStepRead bounds what is read of a checkpoint to find its step: a
// torch.save's pickle holds the keys and no tensor data.
const maxStepRead = 64 << 20

// stepOfFile reads a step from a snapshot's file: the source it came from
// and the step, or ok false. pattern is the base-name glob it matched.
func stepOfFile(path, pattern string) (step int64, source string, ok bool) {
	if n, ok := stepOfName(filepath.Base(path), pattern); ok {
		return n, SourceName, true
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, "", false
	}
	defer f.Close() //nolint:errcheck // read-only file
	head := make([]byte, 4)
	k, _ := io.ReadFull(f, head)
	head = head[:k]
	switch {
	case bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte("{")) || (len(bytes.TrimSpace(head)) == 0 && k > 0):
		if key, n, ok := stepOfJSON(f); ok {
			return n, SourceJSON + " " + key, true
		}
	case bytes.HasPrefix(head, []byte("PK\x03\x04")): // torch.save's zip format
		if key, n, ok := stepOfTorchZip(f); ok {
			return n, SourcePickle + " " + key, true
		}
	case k > 0 && head[0] == 0x80: // a pickle (torch.save's legacy format)
		b, _ := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, maxStepRead), maxStepRead))
		if key, n, ok := stepOfPickle(b); ok {
			return n, SourcePickle + " " + key, true
		}
	}
	return 0, "", false
}

// stepOfName: the last run of digits in the part of name before the
// literal text that ends pattern (after its last wildcard). A pattern
// without a wildcard names one fixed file: its digits are no step.
func stepOfName(name, pattern string) (int64, bool) {
	i := strings.LastIndexAny(pattern, "*?[]")
	if i < 0 {
		return 0, false
	}
	suffix := pattern[i+1:]
	if strings.ContainsAny(suffix, `\`) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	rest := strings.TrimSuffix(name, suffix)
	end := len(rest)
	for end > 0 && (rest[end-1] < '0' || rest[end-1] > '9') {
		end--
	}
	start := end
	for start > 0 && rest[start-1] >= '0' && rest[start-1] <= '9' {
		start--
	}
	if start == end || end-start > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(rest[start:end], 10, 64)
	return n, err == nil
}

func stepOfJSON(f *os.File) (string, int64, bool) {
	var obj map[string]json.RawMessage
	if err := json.NewDecoder(io.NewSectionReader(f, 0, maxStepRead)).Decode(&obj); err != nil {
		return "", 0, false
	}
	for _, k := range stepKeys {
		if raw, ok := obj[k]; ok {
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64); err == nil {
				return k, n, true
			}
		}
	}
	return "", 0, false
}

func stepOfTorchZip(f *os.File) (string, int64, bool) {
	fi, err := f.Stat()
	if err != nil {
		return "", 0, false
	}
	zr, err := zip.NewReader(f, fi.Size())
	if err != nil {
		return "", 0, false
	}
	for _, zf := range zr.File {
		if zf.Name != "data.pkl" && !strings.HasSuffix(zf.Name, "/data.pkl") {
			continue
		}
		rc, err := zf.Open()
		if err != nil {
			return "", 0, false
		}
		b, _ := io.ReadAll(io.LimitReader(rc, maxStepRead))
		rc.Close() //nolint:errcheck // read-only entry
		return stepOfPickle(b)
	}
	return "", 0, false
}

// stepOfPickle finds the first of stepKeys stored as a dict key with an
// integer value: the key as a string opcode (BINUNICODE, SHORT_BINUNICODE),
// a memo opcode perhaps, then an integer opcode (BININT, BININT1, BININT2,
// LONG1). torch.save writes protocol 2; later protocols frame the same
// opcodes. It does not run the pickle: a key of a nested dict counts too,
// which is why the distinctive names come first.
func stepOfPickle(b []byte) (string, int64, bool) {
	for _, k := range stepKeys {
		for _, enc := range pickledStrings(k) {
			for off := 0; ; {
				i := bytes.Index(b[off:], enc)
				if i < 0 {
					break
				}
				at := off + i + len(enc)
				off = off + i + 1
				if n, ok := pickledInt(skipMemo(b, at)); ok {
					return k, n, true
				}
			}
		}
	}
	return "", 0, false
}

func pickledStrings(s string) [][]byte {
	long := append([]byte{'X'}, binary.LittleEndian.AppendUint32(nil, uint32(len(s)))...)
	return [][]byte{append(long, s...), append([]byte{0x8c, byte(len(s))}, s...)}
}

// skipMemo skips a BINPUT, LONG_BINPUT or MEMOIZE after a pushed value.
func skipMemo(b []byte, at int) []byte {
	if at >= len(b) {
		return nil
	}
	switch b[at] {
	case 'q':
		at += 2
	case 'r':
		at += 5
	case 0x94:
		at++
	}
	if at > len(b) {
		return nil
	}
	return b[at:]
}

func pickledInt(b []byte) (int64, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[0] {
	case 'K': // BININT1
		return int64(b[1]), true
	case 'M': // BININT2
		if len(b) >= 3 {
			return int64(binary.LittleEndian.Uint16(b[1:3])), true
		}
	case 'J': // BININT
		if len(b) >= 5 {
			return int64(int32(binary.LittleEndian.Uint32(b[1:5]))), true
		}
	case 0x8a: // LONG1: n bytes, little-endian two's complement
		n := int(b[1])
		if n == 0 {
			return 0, true
		}
		if n > 8 || len(b) < 2+n {
			return 0, false
		}
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[2+i])
		}
		if b[1+n]&0x80 != 0 && n < 8 { // negative: sign-extend
			v |= ^uint64(0) << (8 * n)
		}
		return int64(v), true
	}
	return 0, false
}
