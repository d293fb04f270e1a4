package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"testing"

	"github.com/heatscope/heatscope/internal/benchcpu"
	"github.com/heatscope/heatscope/sample"
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
	// repeated: one stack over and over, as a busy loop is sampled (the
	// stack cache answers); distinct: 4096 stacks in turn, more than the
	// cache holds, each frame looked up.
	b.Run("repeated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Symbolize(pid, kernel, user)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(kernel)+len(user))), "ns/frame")
	})
	b.Run("distinct", func(b *testing.B) {
		stacks := make([][]uint64, 4096)
		for i := range stacks {
			stacks[i] = append([]uint64{k.tab.syms[i*k.Len()/len(stacks)].addr}, kernel[1:]...)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Symbolize(pid, stacks[i%len(stacks)], user)
			i++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(kernel)+len(user))), "ns/frame")
	})
	// leaf: 4096 user stacks in turn whose leaf alone differs, as a
	// CPU-bound program's samples are (its leaf moves from instruction
	// to instruction under the same callers): each a stack the cache
	// does not hold, of frames seen before. CPU time per stack.
	b.Run("leaf", func(b *testing.B) {
		stacks := make([][]uint64, 4096)
		for i := range stacks {
			stacks[i] = append([]uint64{user[0] + uint64(i%512)}, user[1:]...)
			stacks[i][1] += uint64(i / 512) // and its caller's call site
		}
		b.ReportAllocs()
		defer benchcpu.PerOp(b)()
		for i := range b.N {
			s.Symbolize(pid, nil, stacks[i%len(stacks)])
		}
	})
}

// BenchmarkLoadBinary loads the symbol table of this test binary (a Go
// binary with .symtab), of the Go compiler (a large one), of the compiler
// stripped (.gopclntab and no .symtab, as distributions ship Go binaries)
// and of libc (.dynsym), as a cache miss does: the
// file opened, mapped, its build id read, its table built, then unmapped.
// It reports the CPU time per load, the garbage collector's included.
func BenchmarkLoadBinary(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	compiler := filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")
	stripped := filepath.Join(b.TempDir(), "compile")
	if out, err := exec.Command("strip", "-o", stripped, compiler).CombinedOutput(); err != nil {
		b.Logf("strip %s: %v\n%s", compiler, err, out)
	}
	for _, bc := range []struct{ name, path string }{
		{"go-test-binary", exe},
		{"go-compiler", compiler},
		{"go-compiler-stripped", stripped},
		{"libc", "/lib/x86_64-linux-gnu/libc.so.6"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := os.Stat(bc.path); err != nil {
				b.Skipf("no %s here: %v", bc.path, err)
			}
			var syms int
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				f, err := os.Open(bc.path)
				if err != nil {
					b.Fatal(err)
				}
				ef, closeELF, err := openELF(f)
				if err != nil {
					b.Fatal(err)
				}
				bin, err := loadBinary(ef, readBuildID(ef), "")
				closeELF()
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
				syms = bin.tab.len()
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(syms), "symbols")
		})
	}
}

// cpuTime returns the CPU time this process has used, all threads (the
// garbage collector's too): steadier than the wall time on a busy machine.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// BenchmarkNewProcess is the symbolizer's cost for each new process, as
// under process churn: the first sample of a pid never seen before (read
// /proc/PID/maps, open its binary and the libc it calls into, resolve a
// stack of both). Each iteration is a new pid: ProcRoot/PID is a link to
// the /proc directory of one running C fixture, so the cache holds as many
// processes as a busy node's. It reports the heap the process cache keeps
// per process (after a GC, the cache full at MaxProcesses).
func BenchmarkNewProcess(b *testing.B) {
	fx := startC(b)
	stack, _, _ := cChain(b, fx)
	_, write := libcWrite(b, fx.pid)
	stack[0]++ // now a return address: looked up one byte lower
	stack = append([]uint64{write}, stack...)
	const procs = 8192
	root := b.TempDir()
	for pid := 1; pid <= procs; pid++ {
		if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(int(fx.pid))), filepath.Join(root, strconv.Itoa(pid))); err != nil {
			b.Fatal(err)
		}
	}
	s := New(nil, Options{ProcRoot: root, MaxProcesses: procs})
	check := func(frames []sample.Frame) {
		if !strings.Contains(frames[0].Function, "write") || frames[1].Function != "hot_c_function" {
			b.Fatalf("frames %+v", frames[:2])
		}
	}
	check(s.Symbolize(1, nil, stack)) // the binaries are cached from here on
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	b.ReportAllocs()
	pid := uint32(1)
	for b.Loop() {
		pid = pid%procs + 1
		s.Forget(pid)
		s.Observe(pid, "test")
		check(s.Symbolize(pid, nil, stack))
	}
	b.StopTimer()
	for pid := uint32(1); pid <= procs; pid++ {
		s.Observe(pid, "test")
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/procs, "cached-B/process")
	runtime.KeepAlive(s)
}
