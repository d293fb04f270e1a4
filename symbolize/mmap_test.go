package symbolize

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// TestLoadBinaryMapped loads binaries through their mapping, as the
// symbolizer does, and checks that the tables are those read from sections
// copied onto the heap, that the sections were read in place, and that no
// name points into the mapping: every name is read again once it is gone.
func TestLoadBinaryMapped(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{exe, buildGo(t, true), buildC(t, "gcc", cSource, "fixture.c")}
	for _, path := range []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile"),
	} {
		if _, err := os.Stat(path); err == nil {
			files = append(files, path)
		}
	}
	for _, path := range files {
		copied, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := loadBinary(copied, readBuildID(copied), "")
		copied.Close()
		if err != nil {
			t.Fatal(err)
		}

		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mapFile(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		ef, err := elf.NewFile(m)
		if err != nil {
			t.Fatal(err)
		}
		inPlace := 0
		for _, s := range ef.Sections {
			if s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM || s.Name == ".gopclntab" {
				if data, ok := mappedSection(s); !ok || unsafe.SliceData(data) != &m.data[s.Offset] {
					t.Errorf("%s: section %s not read in place", path, s.Name)
				}
				inPlace++
			}
		}
		got, err := loadBinary(ef, readBuildID(ef), "")
		if err != nil {
			t.Fatal(err)
		}
		start := uintptr(unsafe.Pointer(&m.data[0]))
		end := start + uintptr(len(m.data))
		m.unmap()

		if inPlace == 0 {
			t.Errorf("%s: no symbol table or .gopclntab", path)
		}
		for what, s := range map[string]string{"names": got.tab.names, "build id": got.buildID} {
			if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); len(s) > 0 && p >= start && p < end {
				t.Errorf("%s: the table's %s point into the file's mapping, at %#x in [%#x, %#x)", path, what, p, start, end)
			}
		}
		// Reading a name left in the mapping now faults: an error here
		// rather than a crash.
		err = catchFaults(func() error {
			if got.buildID != want.buildID || !slices.Equal(got.loads, want.loads) || !slices.Equal(got.tab.syms, want.tab.syms) {
				t.Errorf("%s: build id %q, %d segments, %d symbols; copied: %q, %d, %d", path,
					got.buildID, len(got.loads), got.tab.len(), want.buildID, len(want.loads), want.tab.len())
			}
			for i := range min(got.tab.len(), want.tab.len()) {
				if got.tab.name(i) != want.tab.name(i) {
					t.Errorf("%s: symbol %d is %q, copied %q", path, i, got.tab.name(i), want.tab.name(i))
					break
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: reading the names after unmapping: %v", path, err)
		}
	}
}

// TestLoadBinaryTruncated truncates a binary after it was mapped, as a
// build rewriting a file in place may: reading it is an error, not a
// crash (SIGBUS).
func TestLoadBinaryTruncated(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "bin")
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	ef, closeELF, err := openELF(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer closeELF()
	if _, ok := mappedSection(ef.Section(".gopclntab")); !ok {
		t.Fatal("not mapped")
	}
	if err := dst.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if id := readBuildID(ef); id != "" {
		t.Errorf("build id %q read from an empty file", id)
	}
	bin, err := loadBinary(ef, "", "")
	if err == nil {
		t.Fatalf("loaded %d symbols from an empty file", bin.tab.len())
	}
	t.Logf("loadBinary: %v", err)
}
