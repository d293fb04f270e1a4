package symbolize

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// TestLoadBinaryTrimsMappedPages loads big binaries while another
// goroutine reads the process's resident file-backed pages (statm's
// "shared") as often as it can, and asserts that a load never holds more
// than a few MiB of its mapping: untrimmed, loading MinIO's symbols held
// 31 MB, the Go compiler's 5.1 MB. One of them is a copy of the compiler
// written here in big writes, as a build or go install leaves a binary:
// in the page cache of Linux 6.18 in 2 MiB folios, which a fault mapped
// whole (the copy held 10 MiB, MinIO freshly installed 14 MiB).
func TestLoadBinaryTrimsMappedPages(t *testing.T) {
	compiler := filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")
	files := []string{compiler}
	if b, err := os.ReadFile(compiler); err == nil {
		fresh, err := os.Create(filepath.Join(t.TempDir(), "compile"))
		if err != nil {
			t.Fatal(err)
		}
		for len(b) > 0 {
			n := min(len(b), 8<<20)
			if _, err := fresh.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		if err := fresh.Close(); err != nil {
			t.Fatal(err)
		}
		files = append(files, fresh.Name())
	}
	if minio := os.Getenv("HEATSCOPE_MINIO"); minio != "" {
		files = append(files, minio) // .ci/run installs it: a 150 MB Go binary
	}
	const bound = 3 << 20 // trimEvery, and what the ELF headers and the table's slack add
	page := int64(os.Getpagesize())
	shared := func() int64 {
		b, err := os.ReadFile("/proc/self/statm")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("statm %q: %v", b, err)
		}
		return n * page
	}
	for _, path := range files {
		if _, err := os.Stat(path); err != nil {
			t.Logf("skipping %s: %v", path, err)
			continue
		}
		runtime.GC()
		base := shared()
		var peak, readings atomic.Int64
		done := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				select {
				case <-done:
					return
				default:
				}
				if d := shared() - base; d > peak.Load() {
					peak.Store(d)
				}
				readings.Add(1)
			}
		}()
		for range 5 {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			ef, unmap, err := openELF(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			bin, err := loadBinary(ef, readBuildID(ef), "")
			unmap()
			if err != nil {
				t.Fatal(err)
			}
			if bin.tab.len() < 1000 {
				t.Fatalf("%s: %d symbols, want a big binary", path, bin.tab.len())
			}
		}
		close(done)
		<-watched
		t.Logf("%s: at most %.1f MiB of file-backed pages above the start over %d readings", path, float64(peak.Load())/(1<<20), readings.Load())
		if readings.Load() < 100 {
			t.Fatalf("%s: only %d readings during the loads", path, readings.Load())
		}
		if peak.Load() > bound {
			t.Errorf("%s: a load held %.1f MiB of its mapping resident, want at most %.1f", path, float64(peak.Load())/(1<<20), float64(bound)/(1<<20))
		}
	}
}
