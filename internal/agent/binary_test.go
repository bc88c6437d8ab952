package agent

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// elfFile is a minimal ELF64 executable: a header and its program
// headers, with an interpreter path when interp is set.
func elfFile(machine elf.Machine, osabi elf.OSABI, typ elf.Type, interp string) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	nph := 1
	if interp != "" {
		nph = 2
	}
	ident := [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT), byte(osabi)}
	b.Write(ident[:])
	for _, v := range []any{uint16(typ), uint16(machine), uint32(elf.EV_CURRENT), uint64(0x401000), uint64(64), uint64(0), uint32(0),
		uint16(64), uint16(56), uint16(nph), uint16(64), uint16(0), uint16(0)} {
		_ = binary.Write(&b, le, v) // a bytes.Buffer takes every write
	}
	data := uint64(64 + 56*nph)
	writePH := func(typ elf.ProgType, off, size uint64) {
		for _, v := range []any{uint32(typ), uint32(elf.PF_R), off, uint64(0x400000) + off, uint64(0x400000) + off, size, size, uint64(1)} {
			_ = binary.Write(&b, le, v)
		}
	}
	if interp != "" {
		writePH(elf.PT_INTERP, data, uint64(len(interp)+1))
	}
	writePH(elf.PT_LOAD, 0, data)
	if interp != "" {
		b.WriteString(interp + "\x00")
	}
	return b.Bytes()
}

func TestCheckBinary(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		data []byte
		want string // "" for a binary that runs on an instance
	}{
		{"static linux amd64", elfFile(elf.EM_X86_64, elf.ELFOSABI_NONE, elf.ET_EXEC, ""), ""},
		{"static pie", elfFile(elf.EM_X86_64, elf.ELFOSABI_LINUX, elf.ET_DYN, ""), ""},
		{"cgo build", elfFile(elf.EM_X86_64, elf.ELFOSABI_NONE, elf.ET_EXEC, "/lib64/ld-linux-x86-64.so.2"), "is dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2)"},
		{"linux arm64", elfFile(elf.EM_AARCH64, elf.ELFOSABI_NONE, elf.ET_EXEC, ""), "is built for EM_AARCH64, not x86-64"},
		{"freebsd", elfFile(elf.EM_X86_64, elf.ELFOSABI_FREEBSD, elf.ET_EXEC, ""), "is built for ELFOSABI_FREEBSD, not Linux"},
		{"object file", elfFile(elf.EM_X86_64, elf.ELFOSABI_NONE, elf.ET_REL, ""), "is not an executable (ELF type ET_REL)"},
		{"macos arm64", append([]byte{0xcf, 0xfa, 0xed, 0xfe}, make([]byte, 60)...), "is a macOS executable"},
		{"windows", []byte("MZ\x90\x00rest"), "is a Windows executable"},
		{"script", []byte("#!/bin/sh\necho hi\n"), "is not an executable (no ELF header)"},
		{"empty", nil, "is not an executable (too short)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.WriteFile(p, c.data, 0o755); err != nil {
				t.Fatal(err)
			}
			err := CheckBinary(p)
			if c.want == "" {
				if err != nil {
					t.Fatalf("CheckBinary: %v, want nil", err)
				}
				return
			}
			var be *BinaryError
			if !errors.As(err, &be) || !errors.Is(err, ErrBinary) {
				t.Fatalf("CheckBinary: %v (%T), want a *BinaryError", err, err)
			}
			if be.Problem != c.want || be.Path != p {
				t.Fatalf("problem %q at %q, want %q at %q", be.Problem, be.Path, c.want, p)
			}
		})
	}
	err := CheckBinary(filepath.Join(dir, "missing"))
	if !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "cannot be read (no such file or directory)") {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestLocalBinary(t *testing.T) {
	got, err := LocalBinary(func(k string) string { return map[string]string{BinaryEnv: "/opt/vastrun-linux"}[k] })
	if err != nil || got != "/opt/vastrun-linux" {
		t.Fatalf("with %s set: %q, %v", BinaryEnv, got, err)
	}
	self, _ := os.Executable()
	if got, err := LocalBinary(func(string) string { return "" }); err != nil || got != self {
		t.Fatalf("unset: %q, %v; want this executable %q", got, err, self)
	}
}
