// Command sampler benchmarks heatscope's sampler against perf on the same
// workload, at the same time: one process per CPU, pinned, interleaving two
// hot functions and one-byte reads of /dev/zero at a fine grain
// (testdata/mixed.c), keeps every CPU busy while `heatscope record` and
// `perf record -F 99 -a -g` both sample it. It repeats that -runs times and
// prints a markdown report: samples received against expected, ring-buffer
// drops, each profiler's CPU time (heatscope's including the BPF program's
// run time), peak RSS, the top leaf functions of both side by side, and the
// medians and spread over the runs.
//
// perf record's own CPU time leaves out symbolization, which perf does
// later in perf report or perf script; the report also gives perf record
// plus `perf script` (every sample's stack symbolized, as heatscope keeps
// them). With -throughput it also measures what each profiler costs the
// workload: the work it completes per second alone, under perf record and
// under heatscope, one after the other.
//
// With -unwind it compares the ways of walking user stacks instead
// (unwind.go).
//
// Run it as root from the repository root: go run ./bench/sampler
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/bench/internal/profrun"
)

func main() {
	duration := flag.Duration("duration", 30*time.Second, "how long both profilers record, per run")
	frequency := flag.Int("frequency", 99, "sampling frequency in Hz")
	runs := flag.Int("runs", 3, "how many times to measure")
	throughput := flag.Duration("throughput", 0, "when not 0, also measure the workload's throughput for this long alone, under perf and under heatscope, in each run")
	unwind := flag.Bool("unwind", false, "instead, compare heatscope --unwind fp and dwarf with perf record -g and --call-graph dwarf on a workload without frame pointers")
	profiles := flag.String("agent-profiles", "", "with -unwind: write each heatscope run's own CPU profile (record --cpu-profile) into this existing directory")
	flag.Parse()
	log.SetFlags(0)
	if *unwind {
		if err := runUnwind(*duration, *frequency, *runs, *profiles); err != nil {
			log.Fatalf("unwind benchmark: %v", err)
		}
		return
	}
	if err := run(*duration, *frequency, *runs, *throughput); err != nil {
		log.Fatalf("sampler benchmark: %v", err)
	}
}

func must(cmd *exec.Cmd) {
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// binaries are the programs a run starts.
type binaries struct {
	heatscope, mixed, cacheDir string
}

// result is one run's measurements.
type result struct {
	received, dropped    int64
	expected             float64
	recorded             float64 // seconds
	bpfRuns              int64
	bpfTime              float64 // seconds
	hs, perf, perfScript profrun.Usage
	hsCPU                float64 // agent + BPF, seconds
	// snapshots is whether the agent loaded its exit snapshot program
	// (after process churn or a missed process), whose load costs CPU.
	snapshots            bool
	storeBytes           int64
	perfBytes            int64
	perfSamples          int
	hsLeaves, perfLeaves []leaf
	// hsWorkload and perfWorkload are the leaves of the workload's
	// samples only (comm "mixed").
	hsWorkload, perfWorkload []leaf
	// worstLeaf and worstWorkloadLeaf are the largest differences over
	// heatscope's top 10, in percentage points.
	worstLeaf, worstWorkloadLeaf float64
	// throughput is the workload's cycles per second alone, under perf
	// record and under heatscope (zero without -throughput).
	throughput [3]float64
}

func run(duration time.Duration, hz, runs int, throughput time.Duration) error {
	dir, err := os.MkdirTemp("", "heatscope-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := binaries{
		heatscope: filepath.Join(dir, "heatscope"),
		mixed:     filepath.Join(dir, "mixed"),
		// Fresh for this benchmark: the first run starts with a cold
		// kernel symbol cache, the others with a warm one.
		cacheDir: filepath.Join(dir, "cache"),
	}
	must(exec.Command("go", "build", "-o", b.heatscope, "./cmd/heatscope"))
	must(exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-o", b.mixed, "bench/sampler/testdata/mixed.c"))

	cpus := runtime.NumCPU()
	fmt.Printf("## Sampler: heatscope vs perf, %d runs of %v at %d Hz on %d busy CPUs (kernel %s)\n\n", runs, duration, hz, cpus, profrun.KernelRelease())
	fmt.Printf("Workload: one `bench/sampler/testdata/mixed.c` per CPU, pinned. Run 1 starts with a cold kernel symbol cache.\n\n")
	fmt.Printf("| run | samples / expected | drops | heatscope agent CPU | BPF | heatscope incl. BPF, %% of one CPU | peak RSS | perf record CPU | ratio | perf record + perf script CPU | ratio | worst leaf difference: all samples, workload | exit program loaded |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var results []result
	for i := range runs {
		r, err := measure(b, duration, hz, filepath.Join(dir, fmt.Sprintf("run%d", i)))
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		if throughput > 0 {
			if r.throughput, err = measureThroughput(b, throughput, hz, filepath.Join(dir, fmt.Sprintf("tp%d", i))); err != nil {
				return fmt.Errorf("run %d: throughput: %w", i+1, err)
			}
		}
		results = append(results, r)
		fmt.Printf("| %d | %d / %.0f = %.1f%% | %d | %.3f s | %.3f s (%.1f µs/run) | %.3f%% | %.1f MB | %.3f s | %.2f | %.3f s | %.2f | %.2f pp, %.2f pp | %v |\n",
			i+1, r.received, r.expected, 100*float64(r.received)/r.expected, r.dropped, r.hs.CPU.Seconds(),
			r.bpfTime, 1e6*r.bpfTime/math.Max(1, float64(r.bpfRuns)), 100*r.hsCPU/r.recorded, float64(r.hs.MaxRSS)/1e6,
			r.perf.CPU.Seconds(), r.hsCPU/r.perf.CPU.Seconds(), (r.perf.CPU + r.perfScript.CPU).Seconds(),
			r.hsCPU/(r.perf.CPU+r.perfScript.CPU).Seconds(), r.worstLeaf, r.worstWorkloadLeaf, r.snapshots)
	}
	printSummary(results, throughput)
	return nil
}

// printSummary prints the medians and ranges over the runs, the leaf table
// and the throughput table.
func printSummary(results []result, throughput time.Duration) {
	stat := func(f func(r result) float64) string {
		var v []float64
		for _, r := range results {
			v = append(v, f(r))
		}
		return profrun.MedianRange(v, "%.3f")
	}
	fmt.Printf("\n### Medians over %d runs (range)\n\n| metric | median (min-max) | target |\n|---|---|---|\n", len(results))
	fmt.Printf("| samples received / expected, %% | %s | >= 97%% |\n", stat(func(r result) float64 { return 100 * float64(r.received) / r.expected }))
	fmt.Printf("| ring-buffer drops | %s | 0 |\n", stat(func(r result) float64 { return float64(r.dropped) }))
	fmt.Printf("| BPF program, %% of one CPU | %s | |\n", stat(func(r result) float64 { return 100 * r.bpfTime / r.recorded }))
	fmt.Printf("| heatscope CPU incl. BPF, %% of one CPU | %s | <= 0.5%% |\n", stat(func(r result) float64 { return 100 * r.hsCPU / r.recorded }))
	fmt.Printf("| heatscope peak RSS, MB | %s | <= 60 MB |\n", stat(func(r result) float64 { return float64(r.hs.MaxRSS) / 1e6 }))
	fmt.Printf("| perf record CPU, %% of one CPU | %s | |\n", stat(func(r result) float64 { return 100 * r.perf.CPU.Seconds() / r.recorded }))
	fmt.Printf("| ratio heatscope / perf record | %s | <= 0.5 |\n", stat(func(r result) float64 { return r.hsCPU / r.perf.CPU.Seconds() }))
	fmt.Printf("| ratio heatscope / (perf record + perf script) | %s | |\n", stat(func(r result) float64 { return r.hsCPU / (r.perf.CPU + r.perfScript.CPU).Seconds() }))
	fmt.Printf("| bytes per sample, heatscope data directory | %s | |\n", stat(func(r result) float64 { return float64(r.storeBytes) / float64(r.received) }))
	fmt.Printf("| bytes per sample, perf.data | %s | |\n", stat(func(r result) float64 { return float64(r.perfBytes) / float64(max(1, r.perfSamples)) }))
	fmt.Printf("| worst top-10 leaf difference, all samples, pp | %s | <= 2 |\n", stat(func(r result) float64 { return r.worstLeaf }))
	fmt.Printf("| worst top-10 leaf difference, the workload's samples, pp | %s | <= 2 |\n\n", stat(func(r result) float64 { return r.worstWorkloadLeaf }))

	last := results[len(results)-1]
	printLeaves("all samples", results, last.hsLeaves, func(r result) ([]leaf, []leaf) { return r.hsLeaves, r.perfLeaves })
	printLeaves("the workload's samples (comm mixed)", results, last.hsWorkload, func(r result) ([]leaf, []leaf) { return r.hsWorkload, r.perfWorkload })
	fmt.Printf("perf's own top 10 in the last run, for reference:\n\n| perf leaf | perf |\n|---|---|\n")
	for _, l := range last.perfLeaves[:min(10, len(last.perfLeaves))] {
		fmt.Printf("| `%s` | %.2f%% |\n", l.name, l.pct)
	}
	printThroughput(results, throughput, stat)
}

// printLeaves prints heatscope's top-10 leaves of the last run with both
// profilers' shares: medians over the runs and the worst difference.
func printLeaves(of string, results []result, top []leaf, leaves func(result) (hs, perf []leaf)) {
	fmt.Printf("### Top-10 leaf functions, self %% of %s, medians over the runs\n\n", of)
	fmt.Printf("| heatscope leaf | heatscope | perf | difference, median | difference, worst run |\n|---|---|---|---|---|\n")
	for _, l := range top[:min(10, len(top))] {
		var hs, pf, diff []float64
		worst := 0.0
		for _, r := range results {
			rh, rp := leaves(r)
			h, p := leafShare(rh, l.name), leafShare(rp, l.name)
			hs, pf, diff = append(hs, h), append(pf, p), append(diff, h-p)
			worst = math.Max(worst, math.Abs(h-p))
		}
		slices.Sort(hs)
		slices.Sort(pf)
		slices.Sort(diff)
		fmt.Printf("| `%s` | %.2f%% | %.2f%% | %+.2f pp | %.2f pp |\n", l.name, profrun.Median(hs), profrun.Median(pf), profrun.Median(diff), worst)
	}
	fmt.Println()
}

// printThroughput prints the workload's throughput without and with each
// profiler.
func printThroughput(results []result, throughput time.Duration, stat func(func(result) float64) string) {
	if throughput > 0 {
		fmt.Printf("\n### Workload throughput, %v per configuration and run (cycles of mixed.c per second, all CPUs)\n\n", throughput)
		fmt.Printf("| configuration | median (min-max) | slowdown against none, median |\n|---|---|---|\n")
		for i, name := range []string{"no profiler", "perf record -F 99 -a -g", "heatscope record"} {
			var slow []float64
			for _, r := range results {
				slow = append(slow, 100*(1-r.throughput[i]/r.throughput[0]))
			}
			slices.Sort(slow)
			fmt.Printf("| %s | %s | %.2f%% |\n", name, stat(func(r result) float64 { return r.throughput[i] }), profrun.Median(slow))
		}
	}
}

// worstDifference is the largest difference between the two profilers'
// shares of heatscope's top-10 leaves.
func worstDifference(hs, perf []leaf) float64 {
	worst := 0.0
	for _, l := range hs[:min(10, len(hs))] {
		worst = math.Max(worst, math.Abs(l.pct-leafShare(perf, l.name)))
	}
	return worst
}

// startWorkload starts one mixed.c per CPU, pinned to it.
func startWorkload(mixed string) ([]*exec.Cmd, error) {
	var procs []*exec.Cmd
	for cpu := range runtime.NumCPU() {
		c := exec.Command("taskset", "-c", strconv.Itoa(cpu), mixed)
		c.Stdout = new(bytes.Buffer)
		if err := c.Start(); err != nil {
			stopWorkload(procs)
			return nil, err
		}
		procs = append(procs, c)
	}
	return procs, nil
}

// startMeasuring makes dir, starts the workload (startWorkload) and gives
// it a second to get going before a sampler starts.
func startMeasuring(dir, workload string) ([]*exec.Cmd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	procs, err := startWorkload(workload)
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	return procs, nil
}

// stopWorkload ends the workload and returns the cycles it completed.
func stopWorkload(procs []*exec.Cmd) int64 {
	var cycles int64
	for _, c := range procs {
		c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range procs {
		c.Wait()
		n, _ := strconv.ParseInt(strings.TrimSpace(c.Stdout.(*bytes.Buffer).String()), 10, 64)
		cycles += n
	}
	return cycles
}

// heatscopeCmd is heatscope record on the whole machine for duration,
// into data, with extra flags.
func heatscopeCmd(b binaries, duration time.Duration, hz int, data string, extra ...string) *exec.Cmd {
	args := []string{"record", "--duration", duration.String(), "--frequency", strconv.Itoa(hz),
		"--data", data, "--cache-dir", b.cacheDir, "--bpf-stats"}
	return exec.Command(b.heatscope, append(args, extra...)...)
}

// measure runs both profilers at once on the workload.
func measure(b binaries, duration time.Duration, hz int, dir string) (result, error) {
	var r result
	workload, err := startMeasuring(dir, b.mixed)
	if err != nil {
		return r, err
	}
	defer stopWorkload(workload)

	hsOut := filepath.Join(dir, "heatscope.pb.gz")
	hsData := filepath.Join(dir, "data")
	// The agent runs as deployed: recording into its data directory only.
	// Its profile for the leaf comparison is exported afterwards.
	hs := heatscopeCmd(b, duration, hz, hsData)
	var hsErr bytes.Buffer
	hs.Stderr = &hsErr
	perfData := filepath.Join(dir, "perf.data")
	perf := profrun.PerfCmd(duration, hz, perfData, "-g")
	var perfErr bytes.Buffer
	perf.Stderr = &perfErr
	if err := hs.Start(); err != nil {
		return r, err
	}
	if err := perf.Start(); err != nil {
		return r, err
	}
	if err := hs.Wait(); err != nil {
		return r, fmt.Errorf("heatscope record: %v\n%s", err, hsErr.String())
	}
	if err := perf.Wait(); err != nil {
		return r, fmt.Errorf("perf record: %v\n%s", err, perfErr.String())
	}
	stopWorkload(workload)
	r.hs, r.perf = profrun.UsageOf(hs.ProcessState), profrun.UsageOf(perf.ProcessState)
	must(exec.Command(b.heatscope, "export", "--data", hsData, "--idle", "include", "-o", hsOut))

	sum, err := profrun.ParseSummary(hsErr.String())
	if err != nil {
		return r, err
	}
	r.received, r.dropped, r.bpfRuns, r.bpfTime, r.recorded = sum.Received, sum.Dropped, sum.BPFRuns, sum.BPFTime, sum.Recorded
	r.snapshots = strings.Contains(hsErr.String(), "snapshotted as they exit") // the switch is logged
	r.expected = duration.Seconds() * float64(hz) * float64(runtime.NumCPU())
	r.hsCPU = r.hs.CPU.Seconds() + r.bpfTime

	if r.hsLeaves, err = heatscopeLeaves(hsOut, ""); err != nil {
		return r, err
	}
	if r.perfLeaves, err = perfLeaves(perfData, ""); err != nil {
		return r, err
	}
	if r.hsWorkload, err = heatscopeLeaves(hsOut, "mixed"); err != nil {
		return r, err
	}
	if r.perfWorkload, err = perfLeaves(perfData, "mixed"); err != nil {
		return r, err
	}
	r.worstLeaf, r.worstWorkloadLeaf = worstDifference(r.hsLeaves, r.perfLeaves), worstDifference(r.hsWorkload, r.perfWorkload)
	if r.storeBytes, err = dirSize(hsData); err != nil {
		return r, err
	}
	info, err := os.Stat(perfData)
	if err != nil {
		return r, err
	}
	r.perfBytes = info.Size()
	r.perfSamples, r.perfScript, err = profrun.PerfScript(perfData)
	return r, err
}

// measureThroughput runs the workload for d alone, under perf record and
// under heatscope record, and returns its cycles per second in each.
func measureThroughput(b binaries, d time.Duration, hz int, dir string) ([3]float64, error) {
	var out [3]float64
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return out, err
	}
	for i := range out {
		workload, err := startWorkload(b.mixed)
		if err != nil {
			return out, err
		}
		var prof *exec.Cmd
		switch i {
		case 1:
			prof = profrun.PerfCmd(d, hz, filepath.Join(dir, "perf.data"), "-g")
		case 2:
			prof = heatscopeCmd(b, d, hz, filepath.Join(dir, "data"))
		}
		start := time.Now()
		if prof != nil {
			if err := prof.Start(); err != nil {
				stopWorkload(workload)
				return out, err
			}
		}
		time.Sleep(d)
		cycles := stopWorkload(workload)
		elapsed := time.Since(start)
		if prof != nil {
			if err := prof.Wait(); err != nil {
				return out, fmt.Errorf("%s: %w", prof.Args[0], err)
			}
		}
		out[i] = float64(cycles) / elapsed.Seconds()
	}
	return out, nil
}

// dirSize adds up the sizes of the files under dir.
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

type leaf struct {
	name string
	pct  float64
}

// heatscopeLeaves reads the leaf shares of an exported profile: of every
// sample, or with comm set of that command's only.
func heatscopeLeaves(path, comm string) ([]leaf, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	counts := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		if comm != "" && (len(s.Label["comm"]) == 0 || s.Label["comm"][0] != comm) {
			continue
		}
		total += s.Value[0]
		name := "[no frames]"
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 {
			name = s.Location[0].Line[0].Function.Name
		}
		counts[name] += s.Value[0]
	}
	return sortLeaves(counts, total), nil
}

// perfLeaves reads `perf report --no-children` leaf percentages: of every
// sample, or with comm set of that command's only.
func perfLeaves(path, comm string) ([]leaf, error) {
	args := []string{"report", "-i", path, "--no-children", "--sort", "sym", "--stdio", "-g", "none", "--percent-limit", "0.01"}
	if comm != "" {
		args = append(args, "--comms", comm, "--percentage", "relative")
	}
	out, err := exec.Command("perf", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("perf report: %w", err)
	}
	line := regexp.MustCompile(`^\s*([0-9.]+)%\s+\[[.k]\]\s+(.+?)\s*$`)
	var leaves []leaf
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			pct, _ := strconv.ParseFloat(m[1], 64)
			leaves = append(leaves, leaf{m[2], pct})
		}
	}
	return leaves, nil
}

// leafShare finds name in a profiler's leaves; perf shows unresolved user
// frames as hex addresses where heatscope shows [module+0xoffset].
func leafShare(leaves []leaf, name string) float64 {
	for _, l := range leaves {
		if l.name == name {
			return l.pct
		}
	}
	return 0
}

func sortLeaves(counts map[string]int64, total int64) []leaf {
	var out []leaf
	for name, n := range counts {
		out = append(out, leaf{name, 100 * float64(n) / float64(total)})
	}
	slices.SortFunc(out, func(a, b leaf) int { return cmp.Or(cmp.Compare(b.pct, a.pct), cmp.Compare(a.name, b.name)) })
	return out
}
