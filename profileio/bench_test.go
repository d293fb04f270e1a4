package profileio

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// syntheticPerfScript returns perf script text like `perf record -a -g`
// gives: n samples of 10 to 30 frames, kernel frames above user frames,
// with perf's padding and offsets. Frames are drawn from sites distinct
// call sites (function, offset and module), or, when sites is 0, are all
// different: the worst case for ReadPerfScript's cache of frame texts.
func syntheticPerfScript(n, sites int) []byte {
	rng := rand.New(rand.NewPCG(7, 8))
	comms := []string{"java", "Web Content", "kworker/0:1-eve", "swapper", "postgres", "node"}
	modules := []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/postgres", "/usr/lib/jvm/libjvm.so", "/tmp/perf-4242.map", "/usr/bin/node"}
	site := func(kernel bool) string {
		f := fmt.Sprintf("namespace::Class%d::method_%d", rng.IntN(97), rng.IntN(1_000_000))
		switch {
		case kernel:
			return fmt.Sprintf("ffffffff81%06x %s+0x%x ([kernel.kallsyms])", rng.IntN(1<<24), f, rng.IntN(512))
		case rng.IntN(20) == 0:
			return fmt.Sprintf("%16x [unknown] (%s)", 0x7f0000000000+rng.IntN(1<<30), modules[rng.IntN(len(modules))])
		default:
			return fmt.Sprintf("%16x %s+0x%x (%s)", 0x400000+rng.IntN(1<<20), f, rng.IntN(512), modules[rng.IntN(len(modules))])
		}
	}
	var kernelSites, userSites []string
	for range sites / 4 {
		kernelSites = append(kernelSites, site(true))
	}
	for range sites - sites/4 {
		userSites = append(userSites, site(false))
	}
	pick := func(kernel bool) string {
		switch {
		case sites == 0:
			return site(kernel)
		case kernel:
			return kernelSites[rng.IntN(len(kernelSites))]
		default:
			return userSites[rng.IntN(len(userSites))]
		}
	}
	var b bytes.Buffer
	t := int64(939_000_000_000)
	for range n {
		t += int64(rng.IntN(2_000_000))
		pid := 1000 + rng.IntN(50)
		fmt.Fprintf(&b, "%16s %d/%d [%03d] %d.%06d:    1001001 cpu-clock:ppp: \n",
			comms[rng.IntN(len(comms))], pid, pid+rng.IntN(4), rng.IntN(16), t/1e9, t%1e9/1e3)
		depth := 10 + rng.IntN(21)
		kernel := rng.IntN(depth / 2)
		for j := range depth {
			b.WriteByte('\t')
			b.WriteString(pick(j < kernel))
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// BenchmarkReadPerfScript reads 50k samples of 10 to 30 frames: drawn from
// 20k call sites (a 30 s system-wide capture has a few thousand), and all
// distinct (the worst case).
func BenchmarkReadPerfScript(b *testing.B) {
	const n = 50_000
	for _, sites := range []int{2_000, 20_000, 0} {
		name := fmt.Sprintf("sites=%d", sites)
		if sites == 0 {
			name = "sites=all-distinct"
		}
		b.Run(name, func(b *testing.B) {
			data := syntheticPerfScript(n, sites)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				count := 0
				if err := ReadPerfScript(bytes.NewReader(data), func(*sample.Sample) error {
					count++
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				if count != n {
					b.Fatalf("%d samples, want %d", count, n)
				}
			}
			reportRates(b, n, cpuTime(b)-cpu)
		})
	}
}

// syntheticFolded returns folded stacks of stacks distinct lines whose
// counts add up to about 50 times as many samples.
func syntheticFolded(stacks int) ([]byte, int) {
	rng := rand.New(rand.NewPCG(9, 10))
	var b bytes.Buffer
	total := 0
	for range stacks {
		b.WriteString("app")
		for range 10 + rng.IntN(21) {
			fmt.Fprintf(&b, ";namespace::Class%d::method_%d", rng.IntN(97), rng.IntN(3000))
		}
		if rng.IntN(3) == 0 {
			b.WriteString(";vfs_read_[k]")
		}
		count := 1 + rng.IntN(100)
		total += count
		fmt.Fprintf(&b, " %d\n", count)
	}
	return b.Bytes(), total
}

func BenchmarkReadFolded(b *testing.B) {
	data, n := syntheticFolded(1000)
	opts := FoldedOptions{FirstFrameIsComm: true}
	start := time.Unix(1_700_000_000, 0)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu := cpuTime(b)
	for b.Loop() {
		count := 0
		if err := opts.Read(bytes.NewReader(data), start, time.Minute, func(*sample.Sample) error {
			count++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if count != n {
			b.Fatalf("%d samples, want %d", count, n)
		}
	}
	reportRates(b, n, cpuTime(b)-cpu)
}

// cpuTime returns the CPU time this process has used, all threads (the
// garbage collector's too).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportRates reports samples per second of wall time and, steadier on a
// busy machine, per second of CPU time.
func reportRates(b *testing.B, perOp int, cpu time.Duration) {
	total := float64(perOp) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(total/cpu.Seconds(), "samples/cpu-s")
}
