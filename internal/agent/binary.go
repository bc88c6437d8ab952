package agent

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
)

// The vastrun copied to every instance (Binary) runs there as the dead-man
// switch and training's supervisor, inside whatever image the run pins:
// Vast's instances are Linux on x86-64, and an image need not have a C
// library (busybox, distroless), so it must be a static linux/amd64 ELF —
// what the release's linux_amd64 archive holds, or
// `CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build ./cmd/vastrun`. A
// controller that is not one itself (macOS, a cgo build) names one in
// BinaryEnv. CheckBinary is judged before anything is rented: an instance
// answers a dynamically linked binary only with "not found" (its loader is
// missing), after the rental is paid for.

// BinaryEnv names the vastrun to copy to instances instead of this one.
const BinaryEnv = "VASTRUN_AGENT_BINARY"

// LocalBinary is the vastrun this controller copies to instances:
// $VASTRUN_AGENT_BINARY, else this executable.
func LocalBinary(getenv func(string) string) (string, error) {
	if p := getenv(BinaryEnv); p != "" {
		return p, nil
	}
	return os.Executable()
}

// ErrBinary classifies a BinaryError.
var ErrBinary = errors.New("the vastrun copied to instances cannot run there")

// BinaryError says why the binary at Path cannot run on an instance.
type BinaryError struct {
	Path    string
	Problem string // "is dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2)"
}

func (e *BinaryError) Error() string {
	return fmt.Sprintf("%s %s: instances run it in any image, so it must be a static linux/amd64 executable", e.Path, e.Problem)
}

func (e *BinaryError) Is(target error) bool { return target == ErrBinary }

// BinaryFix is the hint for a BinaryError.
const BinaryFix = "set " + BinaryEnv + " to a static linux/amd64 vastrun of this version (the release's vastrun_VERSION_linux_amd64.tar.gz, or CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build ./cmd/vastrun)"

// CheckBinary returns a *BinaryError unless path is a static linux/amd64
// ELF executable.
func CheckBinary(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return &BinaryError{Path: path, Problem: "cannot be read (" + errText(err) + ")"}
	}
	defer func() { _ = f.Close() }() // read only
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return &BinaryError{Path: path, Problem: "is not an executable (too short)"}
	}
	switch {
	case bytes.Equal(magic, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.Equal(magic, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return &BinaryError{Path: path, Problem: "is a macOS executable"}
	case bytes.HasPrefix(magic, []byte("MZ")):
		return &BinaryError{Path: path, Problem: "is a Windows executable"}
	case !bytes.Equal(magic, []byte(elf.ELFMAG)):
		return &BinaryError{Path: path, Problem: "is not an executable (no ELF header)"}
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return &BinaryError{Path: path, Problem: "is not a readable ELF file (" + err.Error() + ")"}
	}
	switch {
	case ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN:
		return &BinaryError{Path: path, Problem: "is not an executable (ELF type " + ef.Type.String() + ")"}
	case ef.OSABI != elf.ELFOSABI_NONE && ef.OSABI != elf.ELFOSABI_LINUX:
		return &BinaryError{Path: path, Problem: "is built for " + ef.OSABI.String() + ", not Linux"}
	case ef.Machine != elf.EM_X86_64 || ef.Class != elf.ELFCLASS64:
		return &BinaryError{Path: path, Problem: "is built for " + ef.Machine.String() + ", not x86-64"}
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		interp := make([]byte, min(p.Filesz, 256))
		if _, err := p.ReadAt(interp, 0); err != nil && !errors.Is(err, io.EOF) {
			return &BinaryError{Path: path, Problem: "is dynamically linked"}
		}
		return &BinaryError{Path: path, Problem: "is dynamically linked (interpreter " + string(bytes.TrimRight(interp, "\x00")) + ")"}
	}
	return nil
}

// errText is err without the path an *os.PathError repeats.
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
