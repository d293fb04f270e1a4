// Command soak runs heatscope always-on under process churn and reports
// what operators ask of an agent left on every node: memory over time and
// its slope, CPU, ring-buffer drops, and how well short-lived processes are
// symbolized.
//
//	go run ./bench/soak -duration 30m -hz 99 -churn 200   # the soak (as root)
//	go run ./bench/soak -duration 2m -hz 999 -churn 200   # the high-frequency run
//	go run ./bench/soak -duration 2h -heap-profiles DIR -deploys 20s  # always-on: is memory flat?
//
// The workload starts -churn short-lived processes a second, each a copy
// of the C fixture named "churn" that spins in hot_c_function for 10 to 50
// ms of wall time and exits. The recorder runs as deployed, into a data
// directory, serving /metrics, with the overhead guard off (-max-cpu 0 by
// default) so that its cost is measured, not capped, and with --bpf-stats so
// that the BPF program's run time is counted. Every -every the agent's RSS
// (anonymous and file-backed) and CPU time are read from /proc and its
// counters from /metrics, among them its Go heap in use and its binary
// cache's hits and loads.
//
// With -heap-profiles DIR the agent runs with --heap-profile-dir DIR and
// is sent SIGUSR1 at -heap-at (10 minutes) and 30 seconds before the end;
// the report then shows `go tool pprof -top -diff_base` of the two: what
// grew on the agent's Go heap between them. Each reading is also printed
// on stderr as it is taken, so that a long run can be watched.
//
// With -deploys D it also links a new build of a Go fixture every D and
// runs it for two seconds, the node's other work (deploys.go): the load is
// then the same from the first hour to the last. From the first minute on
// the agent's RSS is read every second, and each new high is explained by
// the mappings that held it (peaks.go).
//
// The share of unknown frames is measured on the samples of the churn
// processes, exported from the data directory after the run: frames left
// as "[module+0xoffset]" over all their frames.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/bench/internal/profrun"
)

func main() {
	duration := flag.Duration("duration", 30*time.Minute, "how long to record")
	hz := flag.Int("hz", 99, "sampling frequency")
	churn := flag.Int("churn", 200, "short-lived processes started per second")
	every := flag.Duration("every", 10*time.Second, "how often to read the agent's RSS, CPU and counters")
	maxCPU := flag.String("max-cpu", "0", "the recorder's --max-cpu (0: guard off, the cost is measured)")
	heapDir := flag.String("heap-profiles", "", "keep the agent's heap profiles, taken at -heap-at and just before the end, in this directory ('' for none)")
	heapAt := flag.Duration("heap-at", 10*time.Minute, "when to take the first heap profile")
	deploys := flag.Duration("deploys", 0, "when not 0, also link and run a new build of a Go fixture this often (the node's other work: the same load from the first hour to the last)")
	flag.Parse()
	if *heapDir != "" && *heapAt+time.Minute > *duration {
		log.Fatalf("-heap-at %v: want at least a minute before the end of -duration %v", *heapAt, *duration)
	}
	if *deploys < 0 {
		log.Fatalf("-deploys %v: want 0 (none) or an interval", *deploys)
	}
	if err := run(*duration, *hz, *churn, *every, *maxCPU, *heapDir, *heapAt, *deploys); err != nil {
		log.Fatal(err)
	}
}

// point is one reading of the agent.
type point struct {
	at    time.Duration // since the recorder started
	rssMB float64
	// what the RSS is made of: anonymous pages (the Go heap, its headroom,
	// stacks) and file-backed ones (the binary's own pages, libc)
	anonMB, fileMB float64
	heapMB         float64 // Go heap in use (go_memstats_heap_inuse_bytes)
	// the binary cache: hits, misses (tables loaded) and the tables' bytes
	binHits, binMisses, symMB float64
	cpu                       time.Duration // user + system
	bpf                       float64       // BPF programs' seconds (sampler and exit snapshots)
	// how the churn processes' mappings were found: /proc reads, exit
	// snapshots, and wakeups the sampler forced to read /proc in time
	mapsReads, snapshots, wakeups float64
	received                      float64
	dropped                       float64
	hz                            float64
}

func run(duration time.Duration, hz, churn int, every time.Duration, maxCPU, heapDir string, heapAt, deploys time.Duration) error {
	dir, err := os.MkdirTemp("", "heatscope-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "heatscope")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/heatscope").CombinedOutput(); err != nil {
		return fmt.Errorf("build heatscope: %v\n%s", err, out)
	}
	fixture := filepath.Join(dir, "churn")
	if out, err := exec.Command("gcc", "-O0", "-fno-omit-frame-pointer", "-o", fixture, "cmd/heatscope/testdata/hotc.c").CombinedOutput(); err != nil {
		return fmt.Errorf("build fixture: %v\n%s", err, out)
	}
	port, err := profrun.FreePort()
	if err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	args := []string{"record", "--duration", duration.String(), "--frequency", strconv.Itoa(hz), "--data", data,
		"--listen", "127.0.0.1:" + port, "--bpf-stats", "--progress", "0", "--max-cpu", maxCPU}
	if heapDir != "" {
		if heapDir, err = filepath.Abs(heapDir); err != nil {
			return err
		}
		if err := os.MkdirAll(heapDir, 0o755); err != nil {
			return err
		}
		args = append(args, "--heap-profile-dir", heapDir)
	}
	rec := exec.Command(bin, args...)
	var recErr bytes.Buffer
	rec.Stderr = &recErr
	started := time.Now()
	if err := rec.Start(); err != nil {
		return err
	}
	recDone := make(chan error, 1)
	go func() { recDone <- rec.Wait() }()
	metricsURL := "http://127.0.0.1:" + port + "/metrics"
	if err := profrun.WaitHTTP(metricsURL, 30*time.Second); err != nil {
		rec.Process.Kill()
		return fmt.Errorf("%v\n%s", err, recErr.String())
	}

	ctx, stopChurn := context.WithCancel(context.Background())
	var spawned, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); spawn(ctx, fixture, churn, &spawned, &failed) }()
	churnStart := time.Now()
	var deployed, deployFailed atomic.Int64
	if deploys > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); deploy(ctx, dir, deploys, &deployed, &deployFailed) }()
	}
	peaksDone := make(chan []peak, 1)
	go func() { peaksDone <- watchPeaks(ctx, rec.Process.Pid, started) }()

	var points []point
	tick := time.NewTicker(every)
	defer tick.Stop()
	pid := rec.Process.Pid
	// The heap profiles: at heapAt and 30 s before the recorder stops.
	var heapTimes <-chan time.Time
	heapDue := []time.Duration{heapAt, duration - 30*time.Second}
	if heapDir != "" {
		heapTimes = time.After(heapAt - time.Since(started))
	}
	var recErrRun error
loop:
	for {
		select {
		case recErrRun = <-recDone:
			break loop
		case <-heapTimes:
			if err := rec.Process.Signal(syscall.SIGUSR1); err != nil {
				log.Printf("heap profile: %v", err)
			}
			log.Printf("asked for a heap profile at %.0fs", time.Since(started).Seconds())
			heapDue = heapDue[1:]
			heapTimes = nil
			if len(heapDue) > 0 {
				heapTimes = time.After(heapDue[0] - time.Since(started))
			}
		case <-tick.C:
			p, err := read(pid, metricsURL)
			if err != nil {
				continue // the recorder is stopping
			}
			p.at = time.Since(started)
			points = append(points, p)
			log.Printf("t=%.0fs rss=%.1fMB (anon %.1f, file %.1f) heap=%.1fMB symbols=%.1fMB cpu=%.1fs received=%.0f dropped=%.0f hz=%.0f",
				p.at.Seconds(), p.rssMB, p.anonMB, p.fileMB, p.heapMB, p.symMB, p.cpu.Seconds(), p.received, p.dropped, p.hz)
		}
	}
	stopChurn()
	wg.Wait()
	peaks := <-peaksDone
	churnFor := time.Since(churnStart)
	if recErrRun != nil {
		return fmt.Errorf("heatscope record: %v\n%s", recErrRun, recErr.String())
	}
	ru := rec.ProcessState.SysUsage().(*syscall.Rusage)
	totalCPU := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	elapsed := time.Since(started)
	peakMB := float64(ru.Maxrss) / 1024

	unknown, frames, churnSamples, hot, err := churnFrames(bin, data)
	if err != nil {
		return err
	}
	report(reportInput{duration: duration, hz: hz, churn: churn, every: every, maxCPU: maxCPU, points: points,
		spawned: spawned.Load(), failed: failed.Load(), churnFor: churnFor, totalCPU: totalCPU, elapsed: elapsed,
		peakMB: peakMB, summary: recErr.String(), unknown: unknown, frames: frames, churnSamples: churnSamples, hot: hot,
		deploys: deploys, deployed: deployed.Load(), deployFailed: deployFailed.Load(), peaks: peaks})
	if heapDir != "" {
		return heapDiff(heapDir)
	}
	return nil
}

// heapDiff prints what grew on the agent's heap between its first and its
// last heap profile, as `go tool pprof -top -diff_base` says.
func heapDiff(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, "heap-*.pb.gz"))
	if err != nil {
		return err
	}
	if len(names) < 2 {
		return fmt.Errorf("heap profiles: %d in %s, want 2 (the agent logs why one was not written)", len(names), dir)
	}
	// The names sort by time (UTC timestamp, then a sequence number).
	first, last := names[0], names[len(names)-1]
	cmd := []string{"tool", "pprof", "-top", "-sample_index=inuse_space", "-diff_base", first, last}
	out, err := exec.Command("go", cmd...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	fmt.Printf("\nHeap growth between the first and the last profile: go %s\n\n", strings.Join(cmd, " "))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines[:min(len(lines), 30)] {
		fmt.Println("    " + line)
	}
	return nil
}

// spawn starts n fixture processes a second until ctx is done, each
// running for 10 to 50 ms of wall time.
func spawn(ctx context.Context, fixture string, n int, spawned, failed *atomic.Int64) {
	t := time.NewTicker(time.Second / time.Duration(n))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		secs := strconv.FormatFloat(0.010+0.040*rand.Float64(), 'f', 3, 64)
		c := exec.Command(fixture, secs)
		if err := c.Start(); err != nil {
			failed.Add(1)
			continue
		}
		spawned.Add(1)
		wg.Add(1)
		go func() { defer wg.Done(); c.Wait() }()
	}
}

// read takes one reading of the agent: RSS and CPU from /proc, counters
// from /metrics.
func read(pid int, url string) (point, error) {
	var p point
	var err error
	if p.rssMB, p.anonMB, p.fileMB, err = rssOf(pid); err != nil {
		return p, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	p.cpu = time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ = 100
	m, err := profrun.ReadMetrics(url)
	if err != nil {
		return p, err
	}
	p.bpf = m["heatscope_bpf_program_seconds_total"] + m["heatscope_bpf_exit_program_seconds_total"]
	p.received = m["heatscope_samples_received_total"]
	p.dropped = m["heatscope_samples_dropped_total"]
	p.hz = m["heatscope_sampling_frequency_hertz"]
	p.mapsReads = m["heatscope_symbolizer_maps_reads_total"]
	p.snapshots = m["heatscope_symbolizer_snapshots_total"]
	p.wakeups = m["heatscope_sampler_wakeups_total"]
	p.heapMB = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
	p.binHits = m["heatscope_symbolizer_binary_cache_hits_total"]
	p.binMisses = m["heatscope_symbolizer_binary_cache_misses_total"]
	p.symMB = m["heatscope_symbol_cache_bytes"] / (1 << 20)
	return p, nil
}

// steadyOf returns the median and the maximum of what of reads from the
// points taken from from on (NaN for none).
func steadyOf(points []point, from time.Duration, of func(point) float64) (median, maxOf float64) {
	var window []float64
	for _, p := range points {
		if p.at >= from {
			window = append(window, of(p))
		}
	}
	if len(window) == 0 {
		return math.NaN(), math.NaN()
	}
	sort.Float64s(window)
	return window[len(window)/2], window[len(window)-1]
}

// churnFrames exports the churn processes' samples as folded stacks and
// counts their frames, the unknown ones ("[module+0xoffset]"), their
// samples and those whose leaf is the hot function.
func churnFrames(bin, data string) (unknown, frames, samples, hot int64, err error) {
	out, err := exec.Command(bin, "export", "--data", data, "--comm", "churn", "--format", "folded", "-o", "-").Output()
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("export the churn samples: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		n, perr := strconv.ParseInt(line[i+1:], 10, 64)
		if perr != nil {
			continue
		}
		names := strings.Split(line[:i], ";")[1:] // the first is the command
		samples += n
		if len(names) > 0 && names[len(names)-1] == "hot_c_function" {
			hot += n
		}
		for _, name := range names {
			frames += n
			if strings.HasPrefix(name, "[") && strings.Contains(name, "+0x") {
				unknown += n
			}
		}
	}
	return unknown, frames, samples, hot, sc.Err()
}

type reportInput struct {
	duration, every, churnFor, totalCPU, elapsed time.Duration
	hz, churn                                    int
	maxCPU                                       string
	points                                       []point
	spawned, failed                              int64
	peakMB                                       float64
	summary                                      string
	unknown, frames, churnSamples, hot           int64
	deploys                                      time.Duration
	deployed, deployFailed                       int64
	peaks                                        []peak
}

func report(in reportInput) {
	fmt.Printf("soak: %v at %d Hz, %d short-lived processes/s (started %d in %.0fs = %.0f/s, %d failed to start), --max-cpu %s\n\n",
		in.duration, in.hz, in.churn, in.spawned, in.churnFor.Seconds(), float64(in.spawned)/in.churnFor.Seconds(), in.failed, in.maxCPU)
	if in.deploys > 0 {
		fmt.Printf("deploys: a new build of the Go fixture every %v, run for 2 s: %d run, %d failed\n\n", in.deploys, in.deployed, in.deployFailed)
	}
	fmt.Println("| t | RSS MB | anon / file MB | Go heap in use MB | agent CPU % (interval) | + BPF % | samples | dropped | Hz |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	step := max(1, len(in.points)/20) // at most ~20 rows
	for i, p := range in.points {
		if i%step != 0 && i != len(in.points)-1 {
			continue
		}
		cpuPct, bpfPct := 0.0, 0.0
		if i > 0 {
			q := in.points[i-1]
			dt := (p.at - q.at).Seconds()
			cpuPct = 100 * (p.cpu - q.cpu).Seconds() / dt
			bpfPct = 100 * (p.bpf - q.bpf) / dt
		}
		fmt.Printf("| %.0fs | %.1f | %.1f / %.1f | %.1f | %.2f | %.2f | %.0f | %.0f | %.0f |\n",
			p.at.Seconds(), p.rssMB, p.anonMB, p.fileMB, p.heapMB, cpuPct, bpfPct, p.received, p.dropped, p.hz)
	}
	fmt.Println()
	slope, n := rssSlope(in.points, time.Minute)
	// The agent warms up for minutes (symbol tables, the store's first
	// blocks): the second half of the run says whether RSS still grows.
	late, nLate := rssSlope(in.points, in.elapsed/2)
	lateMin, lateMax := math.Inf(1), math.Inf(-1)
	for _, p := range in.points {
		if p.at >= in.elapsed/2 {
			lateMin, lateMax = min(lateMin, p.rssMB), max(lateMax, p.rssMB)
		}
	}
	// Steady state: the last hour of runs of two hours or more, else the
	// second half.
	from := max(in.elapsed/2, in.elapsed-time.Hour)
	steady, nSteady := rssSlope(in.points, from)
	steadyMedian, steadyMax := steadyOf(in.points, from, func(p point) float64 { return p.rssMB })
	anonMedian, _ := steadyOf(in.points, from, func(p point) float64 { return p.anonMB })
	fileMedian, _ := steadyOf(in.points, from, func(p point) float64 { return p.fileMB })
	heapMedian, heapMax := steadyOf(in.points, from, func(p point) float64 { return p.heapMB })
	var last point
	if len(in.points) > 0 {
		last = in.points[len(in.points)-1]
	}
	agentPct := 100 * in.totalCPU.Seconds() / in.elapsed.Seconds()
	bpfPct := 100 * last.bpf / last.at.Seconds()
	steadyPct := steadyCPU(in.points)
	unknownPct := 0.0
	if in.frames > 0 {
		unknownPct = 100 * float64(in.unknown) / float64(in.frames)
	}
	hotPct := 0.0
	if in.churnSamples > 0 {
		hotPct = 100 * float64(in.hot) / float64(in.churnSamples)
	}
	fmt.Println("| metric | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| peak RSS (VmHWM) | %.1f MB | <= 80 MB |\n", in.peakMB)
	fmt.Printf("| RSS slope after the first minute (least squares over %d readings) | %+.2f MB/hour | ≈ 0 |\n", n, slope)
	fmt.Printf("| RSS slope over the second half (least squares over %d readings; RSS %.1f-%.1f MB) | %+.2f MB/hour | ≈ 0 |\n", nLate, lateMin, lateMax, late)
	fmt.Printf("| RSS slope from %.0f min to the end (least squares over %d readings) | **%+.2f MB/hour** | within ±2 MB/hour |\n", from.Minutes(), nSteady, steady)
	fmt.Printf("| steady RSS from %.0f min to the end: median (max) | **%.1f MB** (%.1f MB) | <= 60 MB |\n", from.Minutes(), steadyMedian, steadyMax)
	fmt.Printf("| of it, from %.0f min: anonymous / file-backed (medians) | %.1f MB / %.1f MB | |\n", from.Minutes(), anonMedian, fileMedian)
	fmt.Printf("| Go heap in use from %.0f min: median (max) | %.1f MB (%.1f MB) | |\n", from.Minutes(), heapMedian, heapMax)
	if lookups := last.binHits + last.binMisses; lookups > 0 {
		fmt.Printf("| binary cache: hits / tables loaded, hit rate; tables at the end | %.0f / %.0f, %.2f%%; %.1f MB | |\n",
			last.binHits, last.binMisses, 100*last.binHits/lookups, last.symMB)
	}
	fmt.Printf("| agent CPU, whole run (user+sys) | %.3f%% of one CPU | |\n", agentPct)
	fmt.Printf("| agent CPU after the first minute (user+sys) | %.3f%% of one CPU | |\n", steadyPct)
	fmt.Printf("| BPF programs (sampler, exit snapshots) | %.3f%% of one CPU | |\n", bpfPct)
	fmt.Printf("| agent + BPF, whole run | **%.3f%%** of one CPU | <= 1%% |\n", agentPct+bpfPct)
	fmt.Printf("| samples received / ring-buffer drops | %.0f / **%.0f** | 0 drops |\n", last.received, last.dropped)
	fmt.Printf("| churn samples, of them in hot_c_function | %d, %.1f%% | |\n", in.churnSamples, hotPct)
	fmt.Printf("| unknown frames of the churn processes | %d of %d = **%.2f%%** | <= 5%% |\n", in.unknown, in.frames, unknownPct)
	fmt.Printf("| processes' mappings: /proc reads / exit snapshots / forced wakeups | %.0f / %.0f / %.0f | |\n", last.mapsReads, last.snapshots, last.wakeups)
	fmt.Println()
	reportPeaks(in.peaks)
	for _, line := range strings.Split(strings.TrimSpace(in.summary), "\n") {
		if strings.HasPrefix(line, "recorded") || strings.HasPrefix(line, "agent:") || strings.Contains(line, "sampling frequency changed") {
			fmt.Println("    " + line)
		}
	}
}

// reportPeaks prints the RSS highs after the first minute (the first is
// the reading at one minute), the last ten, with the mappings that held
// them.
func reportPeaks(peaks []peak) {
	if len(peaks) == 0 {
		fmt.Println("No RSS reading after the first minute (a run shorter than a minute).")
		fmt.Println()
		return
	}
	fmt.Printf("RSS highs after the first minute (read every second; the last %d of %d) and the mappings with the most resident memory then:\n\n", min(10, len(peaks)), len(peaks))
	for _, p := range peaks[max(0, len(peaks)-10):] {
		fmt.Printf("    %6.0fs  %6.1f MB (anon %.1f, file %.1f): %s\n", p.at.Seconds(), p.rssMB, p.anonMB, p.fileMB, strings.Join(p.top, "; "))
	}
	fmt.Println()
}

// rssSlope fits RSS against time by least squares over the readings from
// from on, in MB per hour, and says how many readings it fitted.
func rssSlope(points []point, from time.Duration) (float64, int) {
	var xs, ys []float64
	for _, p := range points {
		if p.at >= from {
			xs = append(xs, p.at.Hours())
			ys = append(ys, p.rssMB)
		}
	}
	n := float64(len(xs))
	if n < 2 {
		return math.NaN(), len(xs)
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx), len(xs)
}

// steadyCPU is the agent's user+sys CPU from the first reading after one
// minute to the last, in percent of one CPU.
func steadyCPU(points []point) float64 {
	for i, p := range points {
		if p.at >= time.Minute && i < len(points)-1 {
			last := points[len(points)-1]
			return 100 * (last.cpu - p.cpu).Seconds() / (last.at - p.at).Seconds()
		}
	}
	return math.NaN()
}
