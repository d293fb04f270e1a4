package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// BenchmarkSymbolize symbolizes one stack of this test binary's own frames
// under a kernel stack, with warm caches: the per-sample cost.
func BenchmarkSymbolize(b *testing.B) {
	k, err := LoadKernel("/proc/kallsyms")
	if err != nil {
		b.Logf("using testdata/kallsyms/basic: %v", err)
		if k, err = LoadKernel("testdata/kallsyms/basic"); err != nil {
			b.Fatal(err)
		}
	}
	var kernel []uint64
	for i := range 8 {
		kernel = append(kernel, k.tab.syms[(i+1)*k.Len()/10].addr+0x10)
	}
	pcs := make([]uintptr, 16)
	var user []uint64
	for _, pc := range pcs[:runtime.Callers(1, pcs)] {
		user = append(user, uint64(pc))
	}
	pid := uint32(os.Getpid())
	s := New(k, Options{})
	for _, f := range s.Symbolize(pid, kernel, user) {
		if f.Function == "" || f.Kind == 0 {
			b.Fatalf("unresolved frame %+v", f)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Symbolize(pid, kernel, user)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(kernel)+len(user))), "ns/frame")
}

// BenchmarkLoadBinary loads the symbol table of this test binary (a
// stripped Go binary: .gopclntab only), of the Go compiler (a large Go
// binary with .symtab) and of libc (.dynsym), as a cache miss does.
func BenchmarkLoadBinary(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, path string }{
		{"go-test-binary", exe},
		{"go-compiler", filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")},
		{"libc", "/lib/x86_64-linux-gnu/libc.so.6"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := os.Stat(bc.path); err != nil {
				b.Skipf("no %s here: %v", bc.path, err)
			}
			var syms int
			b.ReportAllocs()
			for b.Loop() {
				f, err := elf.Open(bc.path)
				if err != nil {
					b.Fatal(err)
				}
				bin, err := loadBinary(f, readBuildID(f), "")
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
				syms = bin.tab.len()
			}
			b.ReportMetric(float64(syms), "symbols")
		})
	}
}

// BenchmarkLoadKernel loads the running kernel's /proc/kallsyms, or the
// testdata file when the addresses are hidden from this process, as
// start-up does.
func BenchmarkLoadKernel(b *testing.B) {
	path := "/proc/kallsyms"
	if _, err := LoadKernel(path); err != nil {
		b.Logf("using testdata/kallsyms/basic: %v", err)
		path = "testdata/kallsyms/basic"
	}
	var syms int
	b.ReportAllocs()
	for b.Loop() {
		k, err := LoadKernel(path)
		if err != nil {
			b.Fatal(err)
		}
		syms = k.Len()
	}
	b.ReportMetric(float64(syms), "symbols")
}

// BenchmarkLoadKernelCached loads the running kernel's symbols from a warm
// KernelCache, as the agent's start-up does after its first run in a boot.
func BenchmarkLoadKernelCached(b *testing.B) {
	c := DefaultKernelCache(b.TempDir())
	if _, _, err := c.Load(); err != nil {
		b.Skipf("no kernel symbols to cache: %v", err)
	}
	var syms int
	b.ReportAllocs()
	for b.Loop() {
		k, hit, err := c.Load()
		if err != nil || !hit {
			b.Fatalf("Load: hit %v, err %v", hit, err)
		}
		syms = k.Len()
	}
	b.ReportMetric(float64(syms), "symbols")
}
