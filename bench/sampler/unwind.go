package main

// -unwind: heatscope's frame-pointer and table walks against perf's
// frame-pointer and DWARF call graphs, on a workload built without frame
// pointers (testdata/nofp.c, one per CPU, pinned). Each of the four
// samplers records alone for -duration, one after the other, in each run,
// so that none pays for another's work (perf --call-graph dwarf copies
// 8 KB of stack per sample).

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/heatscope/heatscope/bench/internal/loadavg"
	"github.com/heatscope/heatscope/bench/internal/profrun"
)

// unwindResult is one sampler's measurements in one run.
type unwindResult struct {
	received, expected float64
	// bpfUs is heatscope's BPF run time per sample (µs), cpu the
	// sampler's CPU incl. BPF (% of one CPU), rss its peak RSS (MB).
	bpfUs, cpu, rss float64
	// steady is heatscope's CPU incl. BPF (% of one CPU) from steadyFrom
	// after its start to the end of -duration (-1: not measured): without
	// the start's fixed costs (loading the BPF programs, the kernel
	// symbols, the tables), which a 20 s run spreads over few seconds
	// and an always-on agent over days.
	steady float64
	// workload is the number of the workload's samples, main the share of
	// them whose user stack reaches main.
	workload int
	main     float64
	// tablesIn is, for heatscope, the longest time over the workload's
	// processes from a process's first sample to its first sample that
	// reaches main: how long its tables took to reach the BPF maps (-1:
	// never).
	tablesIn time.Duration
}

var unwindSamplers = []string{"heatscope --unwind fp", "heatscope --unwind dwarf", "perf record -g", "perf record --call-graph dwarf"}

func runUnwind(duration time.Duration, hz, runs int, profiles string) error {
	dir, err := os.MkdirTemp("", "heatscope-bench-unwind-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := binaries{heatscope: filepath.Join(dir, "heatscope"), mixed: filepath.Join(dir, "nofp"), cacheDir: filepath.Join(dir, "cache")}
	must(exec.Command("go", "build", "-o", b.heatscope, "./cmd/heatscope"))
	must(exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-o", b.mixed, "bench/sampler/testdata/nofp.c"))
	cpus := runtime.NumCPU()
	fmt.Printf("## Unwinding: frame pointers vs tables, %d runs of %v each at %d Hz on %d busy CPUs (kernel %s)\n\n", runs, duration, hz, cpus, profrun.KernelRelease())
	fmt.Printf("Workload: one `bench/sampler/testdata/nofp.c` (gcc -O2 -fomit-frame-pointer) per CPU, pinned; each sampler records alone, one after the other. " +
		"Run 1 of heatscope --unwind dwarf starts with no cached table (it builds them), later runs read them from --cache-dir. " +
		"\"reach main\": the workload's samples whose user stack has `main`; \"tables in\": the longest time over the workload's processes from a process's first sample to its first one that reaches main.\n\n")
	fmt.Printf("\"steady\": heatscope's CPU incl. BPF from %v after its start to the end of the run (its process's on-CPU time, exited threads included, from its CPU-time clock; BPF time pro rata), leaving out the start's fixed costs.\n\n", steadyFrom)
	fmt.Printf("| run | sampler | samples / expected | BPF µs/sample | CPU incl. BPF, %% of one CPU | steady | peak RSS | workload samples | reach main | tables in | load average (1 min) before, after |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	all := map[string][]unwindResult{}
	for i := range runs {
		for j, s := range unwindSamplers {
			before := loadavg.OneMinute()
			var profile string
			if profiles != "" && strings.HasPrefix(s, "heatscope") {
				profile = filepath.Join(profiles, fmt.Sprintf("run%d-%s.pprof", i+1, strings.TrimPrefix(s, "heatscope --unwind ")))
			}
			r, err := measureUnwind(b, s, duration, hz, filepath.Join(dir, fmt.Sprintf("run%d-%d", i, j)), profile)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", i+1, s, err)
			}
			after := loadavg.OneMinute()
			all[s] = append(all[s], r)
			bpf, in, steady := "-", "-", "-"
			if strings.HasPrefix(s, "heatscope") {
				bpf = fmt.Sprintf("%.2f", r.bpfUs)
				if r.steady >= 0 {
					steady = fmt.Sprintf("%.3f%%", r.steady)
				}
			}
			if strings.HasSuffix(s, "dwarf") && strings.HasPrefix(s, "heatscope") {
				in = "never"
				if r.tablesIn >= 0 {
					in = r.tablesIn.Round(time.Millisecond).String()
				}
			}
			fmt.Printf("| %d | %s | %.0f / %.0f = %.1f%% | %s | %.3f%% | %s | %.1f MB | %d | %.1f%% | %s | %s, %s |\n", i+1, s, r.received, r.expected,
				100*r.received/r.expected, bpf, r.cpu, steady, r.rss, r.workload, 100*r.main, in, before, after)
		}
	}
	fmt.Printf("\nMedians (range) over the runs:\n\n| sampler | samples / expected | BPF µs/sample | CPU incl. BPF, %% of one CPU | steady | peak RSS, MB | reach main |\n|---|---|---|---|---|---|---|\n")
	for _, s := range unwindSamplers {
		rs := all[s]
		stat := func(f func(unwindResult) float64) string {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r))
			}
			return profrun.MedianRange(v, "%.2f")
		}
		bpf, steady := "-", "-"
		if strings.HasPrefix(s, "heatscope") {
			bpf = stat(func(r unwindResult) float64 { return r.bpfUs })
			steady = steadyMedian(rs)
		}
		fmt.Printf("| %s | %s%% | %s | %s%% | %s | %s | %s%% |\n", s, stat(func(r unwindResult) float64 { return 100 * r.received / r.expected }), bpf,
			stat(func(r unwindResult) float64 { return r.cpu }), steady, stat(func(r unwindResult) float64 { return r.rss }),
			stat(func(r unwindResult) float64 { return 100 * r.main }))
	}
	fmt.Println("\nperf's CPU is `perf record`'s alone: it symbolizes and unwinds (for --call-graph dwarf) later, in `perf script`, which is not counted.")
	return nil
}

// steadyMedian formats the median and range of the runs' steady CPU, in
// % of one CPU, leaving out the runs where it was not measured (-1); "-"
// when none was.
func steadyMedian(rs []unwindResult) string {
	var measured []float64
	for _, r := range rs {
		if r.steady >= 0 {
			measured = append(measured, r.steady)
		}
	}
	if len(measured) == 0 {
		return "-"
	}
	return profrun.MedianRange(measured, "%.2f") + "%"
}

// measureUnwind runs one sampler on the workload for d.
// With profile, heatscope writes its own CPU profile there.
func measureUnwind(b binaries, sampler string, d time.Duration, hz int, dir, profile string) (unwindResult, error) {
	var r unwindResult
	workload, err := startMeasuring(dir, b.mixed)
	if err != nil {
		return r, err
	}
	defer stopWorkload(workload)
	r.expected = d.Seconds() * float64(hz) * float64(runtime.NumCPU())
	var cmd *exec.Cmd
	data := filepath.Join(dir, "data")
	switch sampler {
	case "perf record -g":
		cmd = profrun.PerfCmd(d, hz, data, "-g")
	case "perf record --call-graph dwarf":
		cmd = profrun.PerfCmd(d, hz, data, "--call-graph", "dwarf")
	default:
		args := []string{"--listen", "", "--unwind", strings.TrimPrefix(sampler, "heatscope --unwind ")}
		if profile != "" {
			args = append(args, "--cpu-profile", profile)
		}
		cmd = heatscopeCmd(b, d, hz, data, args...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("%s: %w", sampler, err)
	}
	// The agent's own CPU from steadyFrom to d after its start: its
	// recording starts after its set-up, so it still runs at d.
	r.steady = -1
	var from, to time.Duration
	var errFrom, errTo error
	if d > steadyFrom {
		start := time.Now()
		time.Sleep(steadyFrom)
		from, errFrom = profrun.ProcessCPU(cmd.Process.Pid)
		time.Sleep(d - time.Since(start))
		to, errTo = profrun.ProcessCPU(cmd.Process.Pid)
	}
	if err := cmd.Wait(); err != nil {
		return r, fmt.Errorf("%v\n%s", err, stderr.String())
	}
	u := profrun.UsageOf(cmd.ProcessState)
	r.rss = float64(u.MaxRSS) / 1e6
	if strings.HasPrefix(sampler, "perf") {
		r.cpu = 100 * u.CPU.Seconds() / d.Seconds()
		r.workload, r.main, r.received, err = profrun.PerfReachMain(data, "nofp")
		return r, err
	}
	sum, err := profrun.ParseSummary(stderr.String())
	if err != nil {
		return r, err
	}
	r.received = float64(sum.Received)
	r.bpfUs = 1e6 * sum.BPFTime / math.Max(1, float64(sum.BPFRuns))
	r.cpu = 100 * (u.CPU.Seconds() + sum.BPFTime) / d.Seconds()
	if d > steadyFrom && errFrom == nil && errTo == nil {
		r.steady = 100 * ((to - from).Seconds() + sum.BPFTime*(d-steadyFrom).Seconds()/d.Seconds()) / (d - steadyFrom).Seconds()
	}
	out, err := exec.Command(b.heatscope, "export", "--data", data, "--comm", "nofp", "--stack", "user", "--format", "perf-script", "-o", "-").Output()
	if err != nil {
		return r, fmt.Errorf("heatscope export: %w", err)
	}
	r.workload, r.main, r.tablesIn = profrun.ScriptReachMain(out)
	return r, nil
}

// steadyFrom is how long after its start the agent's steady CPU is
// measured from: its set-up (the BPF programs' loads, the kernel symbols,
// the first tables) takes about 0.3 s of CPU on the test machine.
const steadyFrom = 5 * time.Second
