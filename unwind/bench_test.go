package unwind

import (
	"debug/elf"
	"testing"
)

// BenchmarkCompileLibc compiles Debian's libc's .eh_frame (about 150 KB):
// b.SetBytes makes `go test -bench` report MB of .eh_frame per second, and
// the ms/MB metric is its inverse, the time (one goroutine: CPU time on an
// idle machine) a new binary's table costs per MB of CFI.
func BenchmarkCompileLibc(b *testing.B) {
	f, err := elf.Open(libcPath)
	if err != nil {
		b.Skipf("no %s: %v", libcPath, err)
	}
	defer f.Close()
	tab, err := CompileFile(f)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(tab.Stats.EHFrameBytes))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := CompileFile(f); err != nil {
			b.Fatal(err)
		}
	}
	perMB := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / (float64(tab.Stats.EHFrameBytes) / 1e6) / 1e6
	b.ReportMetric(perMB, "ms/MB")
	b.ReportMetric(float64(len(tab.Rows)), "rows")
}
