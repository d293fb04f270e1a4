package rawsys

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFileWhole(t *testing.T) {
	// Longer than any first buffer, and not a multiple of a page.
	want := bytes.Repeat([]byte("0123456789abcdef\n"), 10000)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, buf := range [][]byte{nil, make([]byte, 0, 7), make([]byte, 3, 1<<20)} {
		got, err := ReadFile(path, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes into a buffer of cap %d, want the file's %d", len(got), cap(buf), len(want))
		}
	}
}

func TestReadFileProc(t *testing.T) {
	// /proc/PID/maps comes a page or so per read.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile("/proc/self/maps", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), exe) || !strings.HasSuffix(string(got), "\n") {
		t.Fatalf("/proc/self/maps read as %d bytes, without the test binary %s or a last line end", len(got), exe)
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadFile(filepath.Join(dir, "nosuch"), nil)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Op != "open" {
		t.Errorf("a missing file: %v, want an open *fs.PathError that is fs.ErrNotExist", err)
	}
	if _, err := ReadFile(dir, nil); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("a directory: %v, want EISDIR", err)
	}
	if _, err := ReadFile("a\x00b", nil); err == nil {
		t.Error("a path with a NUL byte read without an error")
	}
}

func TestStat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 12345), 0o600); err != nil {
		t.Fatal(err)
	}
	link := path + ".link"
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	var want syscall.Stat_t
	if err := syscall.Stat(path, &want); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, link} {
		var got syscall.Stat_t
		if err := Stat(p, &got); err != nil {
			t.Fatal(err)
		}
		if got.Dev != want.Dev || got.Ino != want.Ino || got.Size != 12345 || got.Mode != want.Mode || got.Mtim != want.Mtim {
			t.Errorf("Stat(%s) = dev %d ino %d size %d mode %o, want %d %d 12345 %o", p, got.Dev, got.Ino, got.Size, got.Mode, want.Dev, want.Ino, want.Mode)
		}
	}
	var st syscall.Stat_t
	err := Stat(path+".nosuch", &st)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Op != "stat" {
		t.Errorf("a missing file: %v, want a stat *fs.PathError that is fs.ErrNotExist", err)
	}
}
