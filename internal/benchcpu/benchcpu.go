// Package benchcpu reports a Go benchmark's CPU time per operation beside
// its wall time: on a shared machine the wall time of a short operation is
// mostly its wait for a CPU, its CPU time is not.
package benchcpu

import (
	"runtime"
	"syscall"
	"testing"
)

// PerOp collects garbage (the set-up's, so that it is not collected during
// the loop), resets b's timer and returns a function that reports the
// process's CPU time (user and system, every thread) per operation since,
// as cpu-ns/op. Call it just before the loop and the function just after:
// defer benchcpu.PerOp(b)().
func PerOp(b *testing.B) func() {
	runtime.GC()
	b.ResetTimer()
	start := processCPU(b)
	return func() { b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
