// Command churn benchmarks heatscope record, with its default flags,
// beside `perf record -F 99 -a -g` on a node that starts new processes:
// both record the whole machine at the same time, in each case and run,
// so that their ratio holds however loaded the machine is.
//
// The cases:
//
//	a  two CPU-bound processes (testdata of bench/sampler: nofp.c, built
//	   without frame pointers, so that whole stacks need the table walk)
//	b  a, plus 100 new short-lived processes a second
//	c  a, plus 500 new short-lived processes a second
//	d  a parallel build of this repository's commands from a clean build
//	   cache (GOCACHE in a temporary directory): compilers, linkers
//
// The short-lived processes are, of every ten started, six of a small C
// program (testdata/tiny.c, about a millisecond of work), three shell
// scripts (testdata/churn.sh, builtins only) and one `python3 -c pass`
// (/usr/bin/python3 where there is one: a wrapper such as pyenv's shim
// would start several processes for each).
// The spawner holds at most -max-running at once: on a loaded machine it
// starts fewer than asked, and says how many it started.
//
// For each it prints the agent's CPU (user + system, from its rusage)
// and the BPF programs' (the sampler's and the exit snapshots', from
// kernel.bpf_stats_enabled through --bpf-stats; the exit snapshot
// program's run time per exit apart), the rate held (samples
// received over those expected: seconds x Hz x CPUs), every change the
// overhead guard made, the agent's CPU per new process, its Go garbage
// collections and their CPU (the runtime's estimate), peak RSS, the
// share of the CPU-bound processes' samples whose stack reaches main, and
// perf record's CPU, rate and peak RSS. "steady" figures are taken from
// -steady-from after the agent started (the guard's warm-up: its start-up
// work is not what it costs) to the end. The CPU per new process is the
// agent's steady CPU over that of case a in the same run, divided by the
// new processes (the machine's, from /proc/stat: the agent sees every one)
// over those of case a; "-" where that is not positive.
//
// Run it as root from the repository root:
//
//	go run ./bench/churn -runs 5 -duration 30s
//	go run ./bench/churn -cases b -runs 1 -duration 10m   # the rate held for 10 minutes
//	go run ./bench/churn -cases b -agent-profiles DIR     # where the agent's CPU goes (go tool pprof -top), and its log
//	go run ./bench/churn -cases ab -before /tmp/heatscope-main   # a change against a build from before it, in the same runs
//	go run ./bench/churn -cases b -agent-flags '--max-cpu 0'      # the guard off: 99 Hz throughout, whatever it costs
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/bench/internal/loadavg"
	"github.com/heatscope/heatscope/bench/internal/profrun"
)

func main() {
	duration := flag.Duration("duration", 30*time.Second, "how long both profilers record, per case and run")
	runs := flag.Int("runs", 5, "how many times to measure each case")
	hz := flag.Int("hz", 99, "sampling frequency of both profilers")
	which := flag.String("cases", "abcd", "the cases to run, in order (a, b, c, d)")
	steadyFrom := flag.Duration("steady-from", 10*time.Second, "the steady figures are taken from this long after the agent started to the end")
	maxRunning := flag.Int("max-running", 200, "at most this many short-lived processes at once (the spawner skips a start beyond it)")
	profiles := flag.String("agent-profiles", "", "write each heatscope run's own CPU profile (record --cpu-profile) and its log into this existing directory")
	before := flag.String("before", "", "also measure this heatscope binary (a build from before a change), beside the tree's in every case and run, in turns: "+
		"rows say before and after; compare their ratios to perf, taken in the same runs")
	agentFlags := flag.String("agent-flags", "", "more flags for every heatscope record, space-separated: --max-cpu 0 turns the overhead guard off, "+
		"so that every run samples at -hz throughout and builds compare at the same rate")
	flag.Parse()
	log.SetFlags(0)
	var cs []churnCase
	for _, name := range *which {
		c, ok := caseNamed(string(name))
		if !ok {
			log.Fatalf("-cases %q: want letters of abcd", *which)
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 || *runs < 1 || *steadyFrom+5*time.Second > *duration {
		log.Fatalf("want at least one case, one run and -duration at least 5 s over -steady-from")
	}
	if *profiles != "" {
		if st, err := os.Stat(*profiles); err != nil || !st.IsDir() {
			log.Fatalf("-agent-profiles %s: not a directory", *profiles)
		}
	}
	b := bench{duration: *duration, hz: *hz, steadyFrom: *steadyFrom, maxRunning: *maxRunning, profiles: *profiles, before: *before,
		agentFlags: strings.Fields(*agentFlags)}
	if err := b.run(cs, *runs); err != nil {
		log.Fatalf("churn benchmark: %v", err)
	}
}

// churnCase is one workload.
type churnCase struct {
	name, what string
	spinners   bool // the two CPU-bound processes
	perSecond  int  // short-lived processes started a second
	build      bool // the Go build
	// label says which heatscope binary, bin, measures the case: "" for
	// the tree's alone, "before" and "after" with -before.
	label, bin string
}

// key names the case and the binary measuring it.
func (c churnCase) key() string {
	if c.label == "" {
		return c.name
	}
	return c.name + " " + c.label
}

// withBuilds returns the cases measured by the tree's build, or with
// -before each case by both builds, the first run's order alternating
// with the next (run 1 starts with an empty --cache-dir).
func (b *bench) withBuilds(cs []churnCase, run int) []churnCase {
	var out []churnCase
	for _, c := range cs {
		if b.before == "" {
			c.bin = b.heatscope
			out = append(out, c)
			continue
		}
		old, cur := c, c
		old.label, old.bin = "before", b.before
		cur.label, cur.bin = "after", b.heatscope
		if run%2 == 0 {
			out = append(out, old, cur)
		} else {
			out = append(out, cur, old)
		}
	}
	return out
}

var allCases = []churnCase{
	{name: "a", what: "two CPU-bound processes", spinners: true},
	{name: "b", what: "a + 100 new processes/s", spinners: true, perSecond: 100},
	{name: "c", what: "a + 500 new processes/s", spinners: true, perSecond: 500},
	{name: "d", what: "parallel Go build, clean cache", build: true},
}

func caseNamed(name string) (churnCase, bool) {
	for _, c := range allCases {
		if c.name == name {
			return c, true
		}
	}
	return churnCase{}, false
}

// bench holds the settings and the programs every case runs.
type bench struct {
	duration, steadyFrom time.Duration
	hz, maxRunning       int
	profiles             string
	// before is -before: another heatscope binary to measure beside the
	// tree's ("": none).
	before string
	// agentFlags are -agent-flags, added to every record's own.
	agentFlags []string
	// dir is the temporary directory; heatscope, spinner, tiny and
	// script the programs; cacheDir heatscope's --cache-dir, kept over
	// the runs (run 1 starts cold).
	dir, heatscope, spinner, tiny, script, cacheDir string
	// python is python3 itself, not a wrapper that starts it (pyenv's
	// shim is a shell script starting several processes).
	python string
}

// result is one case's measurements in one run.
type result struct {
	loadBefore, loadAfter string
	// started is the short-lived processes the spawner started (skipped:
	// not started, too many running); forks the machine's new processes
	// over the steady window, and steadySecs that window.
	started, skipped int64
	forks            float64
	steadySecs       float64
	hs, perf         profrun.Usage
	sum              profrun.Summary
	// steadyAgent and steadyBPF are the agent's and the BPF programs'
	// CPU seconds over the steady window; steadyProcesses and steadyWork
	// the agent's own count (heatscope_agent_work_cpu_seconds_total) of
	// its CPU seconds on new processes, and on them plus symbol and
	// unwind tables.
	steadyAgent, steadyBPF      float64
	steadyProcesses, steadyWork float64
	// steadyGCs and steadyGCCPU are the Go garbage collector's cycles
	// in the agent over the steady window, and its CPU seconds by the
	// runtime's estimate (the agent's /metrics): what the guard counts
	// in "the rest" beside the BPF program.
	steadyGCs, steadyGCCPU float64
	// steadyPerf is perf record's CPU seconds over the same window: its
	// start-up (reading every process's maps) left out as the agent's is.
	steadyPerf float64
	// perfScript is what perf script cost to symbolize perf record's
	// samples afterwards, as heatscope does as it records.
	perfScript profrun.Usage
	// perfScriptErr is why perf script could not read perf record's
	// data (another program's BPF events can stop it): the run is kept,
	// its ratio to perf record + perf script left out and this said.
	perfScriptErr error
	perfSamples   int64
	expected      float64
	guard         []string // the guard's changes, "99 → 49 Hz: reason", and work given up
	// workload is the number of the CPU-bound processes' samples, main
	// the share of them that reach main (-1: no such workload).
	workload int
	main     float64
}

func (r result) agentBPF() float64 { return r.hs.CPU.Seconds() + r.sum.BPFTime + r.sum.ExitTime }

// ratioWithScript is the agent's and its BPF programs' CPU over perf
// record's and perf script's; NaN when perf script failed.
func (r result) ratioWithScript() float64 {
	if r.perfScriptErr != nil {
		return math.NaN()
	}
	return r.agentBPF() / (r.perf.CPU + r.perfScript.CPU).Seconds()
}

func (b *bench) run(cs []churnCase, runs int) error {
	dir, err := os.MkdirTemp("", "heatscope-bench-churn-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b.dir = dir
	b.heatscope, b.spinner, b.tiny = filepath.Join(dir, "heatscope"), filepath.Join(dir, "nofp"), filepath.Join(dir, "tiny")
	b.cacheDir = filepath.Join(dir, "cache")
	if b.script, err = filepath.Abs("bench/churn/testdata/churn.sh"); err != nil {
		return err
	}
	for _, cmd := range [][]string{
		{"go", "build", "-o", b.heatscope, "./cmd/heatscope"},
		{"gcc", "-O2", "-fomit-frame-pointer", "-o", b.spinner, "bench/sampler/testdata/nofp.c"},
		{"gcc", "-O1", "-o", b.tiny, "bench/churn/testdata/tiny.c"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
	if b.python, err = findPython(); err != nil {
		return err
	}
	cpus := runtime.NumCPU()
	fmt.Printf("## Churn: heatscope record (default flags) beside perf record -F %d -a -g, %d runs of %v per case on %d CPUs (kernel %s)\n\n",
		b.hz, runs, b.duration, cpus, profrun.KernelRelease())
	fmt.Printf("Load average at the start: %s. Both profilers record the whole machine at once. \"steady\": from %v after the agent started to the end. "+
		"Run 1 starts with an empty --cache-dir (kernel symbols, unwind tables), later runs with what earlier ones left.\n\n", loadavg.Line(), b.steadyFrom)
	fmt.Printf("| run | case | load (1 min) before, after | new processes/s: started, machine | agent CPU | BPF | agent + BPF, %% of one CPU | steady agent + BPF | samples / expected | guard changes | peak RSS | perf CPU | perf samples / expected | perf peak RSS | ratio (agent + BPF) / perf | steady ratio | ratio / (perf record + perf script) | agent µs per new process: over case a | its count: processes, + tables | steady Go GC: collections/s, %% of one CPU | reach main |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	all := map[string][]result{}
	var perProcess = map[string][]float64{}
	for i := range runs {
		base := map[string]*result{} // case a's, per build
		for _, c := range b.withBuilds(cs, i) {
			r, err := b.measure(c, filepath.Join(dir, fmt.Sprintf("run%d-%s%s", i+1, c.name, c.label)), i+1)
			if err != nil {
				return fmt.Errorf("run %d, case %s: %w", i+1, c.key(), err)
			}
			all[c.key()] = append(all[c.key()], r)
			if c.name == "a" {
				base[c.label] = &r
			}
			us := math.NaN()
			if a := base[c.label]; a != nil && c.name != "a" {
				us = marginalMicros(r, *a)
				if !math.IsNaN(us) {
					perProcess[c.key()] = append(perProcess[c.key()], us)
				}
			}
			b.printRow(i+1, c, r, us)
		}
	}
	b.printSummary(b.withBuilds(cs, 1), all, perProcess)
	return nil
}

// measuredMicros is the agent's own count of its CPU on new processes, and
// on them plus symbol and unwind tables, per process the machine started
// over the steady window, in µs; NaN when it started none.
func measuredMicros(r result) (processes, work float64) {
	if r.forks <= 0 {
		return math.NaN(), math.NaN()
	}
	return 1e6 * r.steadyProcesses / r.forks, 1e6 * r.steadyWork / r.forks
}

// marginalMicros is the agent's steady CPU per new process over case a of
// the same run, in µs; NaN where the machine started no more processes
// than in a.
func marginalMicros(r, a result) float64 {
	extra := r.forks/r.steadySecs - a.forks/a.steadySecs
	if extra <= 0 {
		return math.NaN()
	}
	return 1e6 * (r.steadyAgent/r.steadySecs - a.steadyAgent/a.steadySecs) / extra
}

func (b *bench) printRow(run int, c churnCase, r result, us float64) {
	secs := r.sum.Recorded
	guard := "none"
	if len(r.guard) > 0 {
		guard = strings.Join(r.guard, "; ")
	}
	perProc := "-"
	if !math.IsNaN(us) {
		perProc = fmt.Sprintf("%.1f", us)
	}
	rate := fmt.Sprintf("%.0f", float64(r.started)/b.duration.Seconds())
	if r.skipped > 0 {
		rate += fmt.Sprintf(" (%.0f/s skipped: %d running)", float64(r.skipped)/b.duration.Seconds(), b.maxRunning)
	}
	reach := "-"
	if r.workload > 0 {
		reach = fmt.Sprintf("%.1f%% of %d", 100*r.main, r.workload)
	}
	withScript := "- (" + strings.ReplaceAll(fmt.Sprint(r.perfScriptErr), "|", "/") + ")"
	if x := r.ratioWithScript(); !math.IsNaN(x) {
		withScript = fmt.Sprintf("%.2f", x)
	}
	measured := "-"
	if p, w := measuredMicros(r); !math.IsNaN(p) {
		measured = fmt.Sprintf("%.1f, %.1f", p, w)
	}
	fmt.Printf("| %d | %s | %s, %s | %s, %.0f | %.3f%% | %.3f%% | **%.3f%%** | %.3f%% | %.1f%% | %s | %.1f MB | %.3f%% | %.1f%% | %.1f MB | **%.2f** | %.2f | %s | %s | %s | %.2f, %.3f%% | %s |\n",
		run, c.key(), r.loadBefore, r.loadAfter, rate, r.forks/r.steadySecs,
		100*r.hs.CPU.Seconds()/secs, 100*(r.sum.BPFTime+r.sum.ExitTime)/secs, 100*r.agentBPF()/secs,
		100*(r.steadyAgent+r.steadyBPF)/r.steadySecs, 100*float64(r.sum.Received)/r.expected, guard,
		float64(r.hs.MaxRSS)/1e6, 100*r.perf.CPU.Seconds()/b.duration.Seconds(),
		100*float64(r.perfSamples)/(b.duration.Seconds()*float64(b.hz*runtime.NumCPU())), float64(r.perf.MaxRSS)/1e6,
		r.agentBPF()/r.perf.CPU.Seconds(), (r.steadyAgent+r.steadyBPF)/r.steadyPerf, withScript, perProc, measured,
		r.steadyGCs/r.steadySecs, 100*r.steadyGCCPU/r.steadySecs, reach)
}

func (b *bench) printSummary(cs []churnCase, all map[string][]result, perProcess map[string][]float64) {
	fmt.Printf("\n### Medians (range) per case\n\n")
	fmt.Printf("| case | load (1 min) | agent + BPF, %% of one CPU | steady agent + BPF | BPF | exit snapshot, µs per exit | samples / expected | runs with a guard change | peak RSS, MB | perf CPU, %% | perf peak RSS, MB | ratio (agent + BPF) / perf | steady ratio | ratio / (perf record + perf script) | agent µs per new process: over case a | its count: processes | its count: + tables | steady Go GC, collections/s | steady Go GC, %% of one CPU | reach main, %% |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cs {
		rs := all[c.key()]
		stat := func(format string, f func(result) float64) string {
			var v []float64
			for _, r := range rs {
				if x := f(r); !math.IsNaN(x) {
					v = append(v, x)
				}
			}
			if len(v) == 0 {
				return "-"
			}
			return profrun.MedianRange(v, format)
		}
		changed := 0
		for _, r := range rs {
			if len(r.guard) > 0 {
				changed++
			}
		}
		perProc := "-"
		if v := perProcess[c.key()]; len(v) > 0 {
			perProc = profrun.MedianRange(v, "%.1f")
		}
		fmt.Printf("| %s: %s | %s | %s | %s | %s | %s | %s | %d of %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.key(), c.what,
			stat("%.1f", func(r result) float64 { v, _ := strconv.ParseFloat(r.loadBefore, 64); return v }),
			stat("%.3f", func(r result) float64 { return 100 * r.agentBPF() / r.sum.Recorded }),
			stat("%.3f", func(r result) float64 { return 100 * (r.steadyAgent + r.steadyBPF) / r.steadySecs }),
			stat("%.3f", func(r result) float64 { return 100 * (r.sum.BPFTime + r.sum.ExitTime) / r.sum.Recorded }),
			stat("%.2f", func(r result) float64 {
				if r.sum.ExitRuns == 0 {
					return math.NaN()
				}
				return 1e6 * r.sum.ExitTime / float64(r.sum.ExitRuns)
			}),
			stat("%.1f", func(r result) float64 { return 100 * float64(r.sum.Received) / r.expected }),
			changed, len(rs),
			stat("%.1f", func(r result) float64 { return float64(r.hs.MaxRSS) / 1e6 }),
			stat("%.3f", func(r result) float64 { return 100 * r.perf.CPU.Seconds() / b.duration.Seconds() }),
			stat("%.1f", func(r result) float64 { return float64(r.perf.MaxRSS) / 1e6 }),
			stat("%.2f", func(r result) float64 { return r.agentBPF() / r.perf.CPU.Seconds() }),
			stat("%.2f", func(r result) float64 { return (r.steadyAgent + r.steadyBPF) / r.steadyPerf }),
			stat("%.2f", result.ratioWithScript),
			perProc,
			stat("%.1f", func(r result) float64 { p, _ := measuredMicros(r); return p }),
			stat("%.1f", func(r result) float64 { _, w := measuredMicros(r); return w }),
			stat("%.2f", func(r result) float64 { return r.steadyGCs / r.steadySecs }),
			stat("%.3f", func(r result) float64 { return 100 * r.steadyGCCPU / r.steadySecs }),
			stat("%.1f", func(r result) float64 {
				if r.workload == 0 {
					return math.NaN()
				}
				return 100 * r.main
			}))
	}
	fmt.Println("\nThe steady ratio is the agent's and perf record's CPU over the same steady window, both start-ups left out. " +
		"perf's CPU is `perf record`'s alone: it symbolizes later, in `perf report` or `perf script`; " +
		"the last ratio adds what `perf script` cost to symbolize every sample afterwards, as heatscope does while it records. " +
		"The BPF programs' run time is charged by the kernel to the tasks they interrupt, not to the agent: it is added here.")
}

// measure runs one case: its workload, and both profilers beside it.
func (b *bench) measure(c churnCase, dir string, run int) (result, error) {
	var r result
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	r.loadBefore = loadavg.OneMinute()
	stop, err := b.startWorkload(c, dir)
	if err != nil {
		return r, err
	}
	defer stop()
	time.Sleep(time.Second)

	port, err := profrun.FreePort()
	if err != nil {
		return r, err
	}
	data := filepath.Join(dir, "data")
	args := []string{"record", "--duration", b.duration.String(), "--frequency", strconv.Itoa(b.hz), "--data", data,
		"--cache-dir", b.cacheDir, "--bpf-stats", "--listen", "127.0.0.1:" + port}
	if b.profiles != "" {
		args = append(args, "--cpu-profile", filepath.Join(b.profiles, fmt.Sprintf("run%d-%s%s.pprof", run, c.name, c.label)))
	}
	args = append(args, b.agentFlags...)
	hs := exec.Command(c.bin, args...)
	var hsErr bytes.Buffer
	hs.Stderr = &hsErr
	perfData := filepath.Join(dir, "perf.data")
	perf := profrun.PerfCmd(b.duration, b.hz, perfData, "-g")
	var perfErr bytes.Buffer
	perf.Stderr = &perfErr
	if err := hs.Start(); err != nil {
		return r, err
	}
	start := time.Now()
	if err := perf.Start(); err != nil {
		hs.Process.Kill()
		hs.Wait()
		return r, err
	}
	// The steady window: the agent records for -duration after its
	// set-up, so it still runs at -duration after its start.
	metrics := "http://127.0.0.1:" + port + "/metrics"
	time.Sleep(b.steadyFrom)
	from, fromErr := b.reading(hs.Process.Pid, metrics)
	perfFrom, perfFromErr := profrun.ProcessCPU(perf.Process.Pid)
	time.Sleep(time.Until(start.Add(b.duration - 500*time.Millisecond)))
	to, toErr := b.reading(hs.Process.Pid, metrics)
	perfTo, perfToErr := profrun.ProcessCPU(perf.Process.Pid)
	hsWait := hs.Wait()
	perfWait := perf.Wait()
	r.started, r.skipped = stop()
	r.loadAfter = loadavg.OneMinute()
	if hsWait != nil {
		return r, fmt.Errorf("heatscope record: %v\n%s", hsWait, hsErr.String())
	}
	if perfWait != nil {
		return r, fmt.Errorf("perf record: %v\n%s", perfWait, perfErr.String())
	}
	if fromErr != nil || toErr != nil {
		return r, fmt.Errorf("read the agent's CPU and metrics: %v, %v", fromErr, toErr)
	}
	if perfFromErr != nil || perfToErr != nil {
		return r, fmt.Errorf("read perf record's CPU: %v, %v", perfFromErr, perfToErr)
	}
	r.steadyPerf = (perfTo - perfFrom).Seconds()
	r.steadySecs = to.at.Sub(from.at).Seconds()
	r.steadyAgent, r.steadyBPF = (to.cpu - from.cpu).Seconds(), to.bpf-from.bpf
	r.steadyProcesses, r.steadyWork = to.processes-from.processes, to.work-from.work
	r.steadyGCs, r.steadyGCCPU = to.gcs-from.gcs, to.gcCPU-from.gcCPU
	r.forks = to.forks - from.forks
	r.hs, r.perf = profrun.UsageOf(hs.ProcessState), profrun.UsageOf(perf.ProcessState)
	if r.sum, err = profrun.ParseSummary(hsErr.String()); err != nil {
		return r, err
	}
	r.expected = r.sum.Recorded * float64(b.hz*runtime.NumCPU())
	r.guard = guardChanges(hsErr.String())
	if m := regexp.MustCompile(`\((\d+) samples\)`).FindStringSubmatch(perfErr.String()); m != nil {
		r.perfSamples, _ = strconv.ParseInt(m[1], 10, 64)
	}
	logDir := dir
	if b.profiles != "" {
		logDir = b.profiles // kept: the temporary directory is not
	}
	if err := os.WriteFile(filepath.Join(logDir, fmt.Sprintf("run%d-%s%s.log", run, c.name, c.label)), hsErr.Bytes(), 0o644); err != nil {
		return r, err
	}
	if c.spinners {
		out, err := exec.Command(c.bin, "export", "--data", data, "--comm", "nofp", "--stack", "user", "--format", "perf-script", "-o", "-").Output()
		if err != nil {
			return r, fmt.Errorf("heatscope export: %w", err)
		}
		r.workload, r.main, _ = profrun.ScriptReachMain(out)
	}
	if _, r.perfScript, err = profrun.PerfScript(perfData); err != nil {
		r.perfScriptErr = err
		fmt.Fprintf(os.Stderr, "run %d, case %s: %v: its ratio to perf record + perf script is left out\n", run, c.key(), err)
	}
	// perf.data of a build is large: not kept past its case.
	return r, os.RemoveAll(perfData)
}

// reading is the agent's CPU, its BPF programs' and the machine's
// process count at one moment.
type reading struct {
	at    time.Time
	cpu   time.Duration
	bpf   float64 // seconds
	forks float64
	// processes and work are the agent's CPU seconds on new processes,
	// and on all the work that does not fall with the rate.
	processes, work float64
	// gcs and gcCPU are the agent's garbage collections so far and their
	// CPU seconds (the Go runtime's estimate).
	gcs, gcCPU float64
}

func (b *bench) reading(pid int, metrics string) (reading, error) {
	rd := reading{at: time.Now()}
	var err error
	if rd.cpu, err = profrun.ProcessCPU(pid); err != nil {
		return rd, err
	}
	if rd.forks, err = machineForks(); err != nil {
		return rd, err
	}
	m, err := profrun.ReadMetrics(metrics)
	if err != nil {
		return rd, err
	}
	rd.bpf = m["heatscope_bpf_program_seconds_total"] + m["heatscope_bpf_exit_program_seconds_total"]
	rd.processes = m["heatscope_agent_work_cpu_seconds_total{part=new processes}"]
	rd.gcs, rd.gcCPU = m["go_gc_duration_seconds"], m["go_cpu_classes_gc_total_cpu_seconds_total"]
	// The parts that do not fall with the rate: not the samples' own
	// path, nor the store's.
	for _, part := range []string{"new processes", "symbol tables", "unwind tables"} {
		rd.work += m["heatscope_agent_work_cpu_seconds_total{part="+part+"}"]
	}
	return rd, nil
}

// machineForks is /proc/stat's count of processes (and threads) created
// since boot.
func machineForks() (float64, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "processes "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("/proc/stat: no processes line")
}

var (
	guardLine = regexp.MustCompile(`msg="sampling frequency changed" from_hz=(\d+) to_hz=(\d+) reason="([^"]*)"`)
	shedLine  = regexp.MustCompile(`msg="overhead guard: (gave up work before lowering the sampling rate|took up work again)" work="([^"]*)" reason="([^"]*)"`)
	keptLine  = regexp.MustCompile(`msg="overhead guard: over the budget, (?:most of it work a lower sampling rate does not reduce|but a lower sampling rate did not reduce it): the rate stays" hz=(\d+) reason="([^"]*)"`)
)

// guardChanges reads the overhead guard's changes in the agent's log: of
// the frequency, and the work it gave up before lowering it.
func guardChanges(log string) []string {
	var changes []string
	for _, line := range strings.Split(log, "\n") {
		if m := guardLine.FindStringSubmatch(line); m != nil {
			changes = append(changes, fmt.Sprintf("%s → %s Hz: %s", m[1], m[2], m[3]))
		} else if m := shedLine.FindStringSubmatch(line); m != nil {
			verb := "gave up"
			if strings.HasPrefix(m[1], "took") {
				verb = "took up again"
			}
			changes = append(changes, fmt.Sprintf("%s %s: %s", verb, m[2], m[3]))
		} else if m := keptLine.FindStringSubmatch(line); m != nil {
			changes = append(changes, fmt.Sprintf("kept %s Hz over the budget: %s", m[1], m[2]))
		}
	}
	return changes
}

// startWorkload starts a case's workload and returns the function that
// stops it, which returns how many short-lived processes were started
// and skipped.
func (b *bench) startWorkload(c churnCase, dir string) (stop func() (started, skipped int64), err error) {
	var procs []*exec.Cmd
	kill := func() {
		for _, p := range procs {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			p.Wait()
		}
	}
	if c.spinners {
		for range 2 {
			p := exec.Command(b.spinner)
			p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := p.Start(); err != nil {
				kill()
				return nil, err
			}
			procs = append(procs, p)
		}
	}
	if c.build {
		// This repository's commands, compiled and linked from nothing
		// but the module cache.
		out := filepath.Join(dir, "bin") + "/"
		p := exec.Command("go", "build", "-o", out, "./cmd/heatscope", "./bench/...")
		p.Env = append(os.Environ(), "GOCACHE="+filepath.Join(dir, "gocache"), "GOFLAGS=-mod=readonly", "GOPROXY=off")
		p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var started, skipped atomic.Int64
	var wg sync.WaitGroup
	if c.perSecond > 0 {
		wg.Go(func() { b.spawn(ctx, c.perSecond, &started, &skipped) })
	}
	var once sync.Once
	return func() (int64, int64) {
		once.Do(func() {
			cancel()
			wg.Wait()
			kill()
		})
		return started.Load(), skipped.Load()
	}, nil
}

// findPython returns /usr/bin/python3, else the python3 on $PATH.
func findPython() (string, error) {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3", nil
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("the churn cases start python3 -c pass: %w", err)
	}
	return p, nil
}

// spawn starts perSecond short-lived processes a second until ctx is
// done: of every ten, six tiny C programs, three shell scripts and one
// python3 -c pass.
func (b *bench) spawn(ctx context.Context, perSecond int, started, skipped *atomic.Int64) {
	t := time.NewTicker(time.Second / time.Duration(perSecond))
	defer t.Stop()
	var running atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if running.Load() >= int64(b.maxRunning) {
			skipped.Add(1)
			continue
		}
		var c *exec.Cmd
		switch i % 10 {
		case 0:
			c = exec.Command(b.python, "-c", "pass")
		case 1, 4, 7:
			c = exec.Command("/bin/sh", b.script)
		default:
			c = exec.Command(b.tiny)
		}
		// Started off the ticker's goroutine: on a loaded machine one
		// fork and exec can take longer than a tick.
		running.Add(1)
		wg.Go(func() {
			defer running.Add(-1)
			if err := c.Start(); err != nil {
				skipped.Add(1)
				return
			}
			started.Add(1)
			c.Wait()
		})
	}
}
