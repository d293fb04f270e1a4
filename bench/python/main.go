// Command python benchmarks Python frames (issue 24) with the real
// `heatscope record` binary and the scripts of internal/pyfixture, for
// each CPython interpreter installed (pyfixture.Interpreters):
//
//	coverage  busy.py (a pure-Python loop three calls deep) recorded
//	          alone (--pid) with --unwind dwarf: the share of its samples
//	          whose Python frames are its whole chain down to <module>
//	          (read from the perf-script export), over all its samples and
//	          over those from its first sample with Python frames on; and
//	          the code-object cache's hits, misses, objects and bytes
//	          (/metrics, heatscope_python_code_cache_*) against its bound
//	cost      the BPF program's run time per sample (kernel.bpf_stats_enabled,
//	          /metrics) of busy.py against a native process (nofp.c, built
//	          without frame pointers: its stacks walked with tables too),
//	          in short windows (-cost-window) in which one of them runs
//	          alone, every process once per round (-cost-rounds), all of
//	          them and their agent pinned to one CPU (-cost-cpu) and
//	          favoured (-cost-nice); with -cost-before, -before's build
//	          records the same processes beside this tree's, in the same
//	          windows. The figures are medians of ratios taken within one
//	          round (over nofp) or one window (over -before), with their
//	          quartiles and ranges (cost.go says why); an idle window per
//	          round gives the pid filter's cost per skipped run, taken out
//	          before dividing by the samples; and the instructions the
//	          verifier processed to load each build's sampler (its fdinfo)
//	start     -spawn busy.py processes per interpreter started one after
//	          another while the whole machine is recorded: for each, the
//	          time from its first sample to its first sample with Python
//	          frames (a py:: frame in the export); with -trace, the
//	          steps in between from the agent's debug log (its Python
//	          set-up's times) joined with each process's samples
//	no-python the agent's CPU (user + system, and its BPF program's) when
//	          it records the whole machine running only native CPU-bound
//	          processes, this tree's build against -before (a build from
//	          before Python frames), in turns, in the same runs, over a
//	          window from -warm-up on; each build's --cache-dir warmed by
//	          one record first. Others' Python processes running meanwhile
//	          (a shared machine) are counted and named in the output
//
// Each is measured -runs times; the tables give every run and the
// medians with their ranges. Run it as root from the repository root:
//
//	go run ./bench/python -runs 3
//	go run ./bench/python -before /tmp/heatscope-89abb8b   # a build from before issue 24 (default: built from -before-commit)
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"time"

	"github.com/heatscope/heatscope/bench/internal/loadavg"
	"github.com/heatscope/heatscope/bench/internal/profrun"
	"github.com/heatscope/heatscope/internal/pyfixture"
	"github.com/heatscope/heatscope/pysymbol"
)

func main() {
	runs := flag.Int("runs", 3, "how many times to measure each figure")
	duration := flag.Duration("duration", 8*time.Second, "how long busy.py is recorded for its coverage, per interpreter and run")
	costWindow := flag.Duration("cost-window", 300*time.Millisecond, "how long each process runs alone in each round of the BPF cost")
	costRounds := flag.Int("cost-rounds", 20, "rounds of the BPF cost per run: each process runs alone for -cost-window in each, and one window runs none")
	costCPU := flag.Int("cost-cpu", runtime.NumCPU()-1, "the CPU the processes whose BPF cost is measured and their agents are pinned to (-1: not pinned)")
	costHz := flag.Int("cost-hz", 499, "sampling frequency of the BPF cost records")
	warmUp := flag.Duration("warm-up", 1500*time.Millisecond, "the cost and CPU windows start this long after the agent serves /metrics (its tables loaded)")
	spawn := flag.Int("spawn", 10, "new busy.py processes per interpreter and run whose first Python frames are timed")
	cpuDuration := flag.Duration("cpu-duration", 15*time.Second, "how long each build records the machine without Python, per run")
	before := flag.String("before", "", "heatscope binary from before Python frames to compare the agent's CPU with ('': build -before-commit)")
	beforeCommit := flag.String("before-commit", "89abb8b", "the commit -before is built from when not given")
	only := flag.String("only", "", "run only these parts, comma-separated: coverage, cost, start, no-python ('': all)")
	costBefore := flag.Bool("cost-before", false, "measure the BPF cost with -before's build too, in turns with this tree's, and give the same-run ratio (a change to the sampler)")
	costNice := flag.Int("cost-nice", -15, "the nice value of the process whose BPF cost is measured and of its agent (0: left as they are): favoured, it takes most of its CPU's runs on a busy machine")
	startVs := flag.String("start-vs", "", "another heatscope binary (a build from before a change) whose new processes' first Python frames are timed in the same runs, in turns with this tree's")
	trace := flag.Bool("trace", false, "start: run the agents with HEATSCOPE_LOG_LEVEL=debug and break each new process's time to its first Python frames into steps (its exec, first sample, request taken, drain, set-up, entry written) from the agent's \"python set-up\" lines")
	flag.Parse()
	log.SetFlags(0)
	if *runs < 1 || *costRounds < 1 || *costWindow < 100*time.Millisecond || *warmUp+time.Second > *cpuDuration || *costCPU >= runtime.NumCPU() {
		log.Fatal("want -runs ≥ 1, -cost-rounds ≥ 1, -cost-window ≥ 100ms, -cpu-duration at least 1 s over -warm-up and -cost-cpu below the CPU count")
	}
	b := &bench{runs: *runs, duration: *duration, costWindowLen: *costWindow, costRounds: *costRounds, costCPU: *costCPU, costHz: *costHz, warmUp: *warmUp,
		spawn: *spawn, cpuDuration: *cpuDuration, before: *before, startVs: *startVs, parts: map[string]bool{},
		costBefore: *costBefore, costNice: *costNice, trace: *trace, verified: map[string]int{}}
	for _, p := range strings.Split(*only, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case "coverage", "cost", "start", "no-python":
			b.parts[p] = true
		default:
			log.Fatalf("-only: no part %q (coverage, cost, start, no-python)", p)
		}
	}
	if err := b.run(*beforeCommit); err != nil {
		log.Fatalf("python benchmark: %v", err)
	}
}

type bench struct {
	runs, costHz, costRounds, costCPU, spawn     int
	duration, costWindowLen, cpuDuration, warmUp time.Duration
	// dir is the temporary directory; heatscope the tree's build, before
	// the older one, startVs the build whose new processes are timed
	// beside the tree's (-start-vs), spinner the native CPU-bound
	// program, busy the fixture script.
	dir, heatscope, before, startVs, spinner, busy string
	pythons                                        []pyfixture.Interpreter
	// parts are the parts to run (-only; empty: all).
	parts map[string]bool
	// costBefore measures -before's BPF cost too; costNice is the
	// measured process's and its agent's nice value.
	costBefore bool
	costNice   int
	// trace breaks new processes' times into steps (-trace).
	trace bool
	// verified is the instructions the verifier processed to load each
	// build's sampler (cost), by binary.
	verified map[string]int
	// steps holds the steps' times over every run (-trace), ms, by
	// build (the tree's, -start-vs) and step.
	steps map[string]map[string][]float64
}

// label names the build bin in the output and in the names of its
// directories: builds given as files of one name (two heatscope
// binaries) kept apart.
func (b *bench) label(bin string) string {
	switch bin {
	case b.heatscope:
		return "this-tree"
	case b.before:
		return "before"
	case b.startVs:
		return "start-vs"
	}
	return filepath.Base(bin)
}

// wants reports whether the part is to be run (-only).
func (b *bench) wants(part string) bool { return len(b.parts) == 0 || b.parts[part] }

func (b *bench) run(beforeCommit string) error {
	dir, err := os.MkdirTemp("", "heatscope-bench-python-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b.dir = dir
	b.heatscope, b.spinner = filepath.Join(dir, "heatscope"), filepath.Join(dir, "nofp")
	if b.busy, err = filepath.Abs("internal/pyfixture/scripts/busy.py"); err != nil {
		return err
	}
	for _, cmd := range [][]string{
		{"go", "build", "-o", b.heatscope, "./cmd/heatscope"},
		{"gcc", "-O2", "-fomit-frame-pointer", "-o", b.spinner, "bench/sampler/testdata/nofp.c"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
	if b.before == "" && (b.wants("no-python") || b.costBefore && b.wants("cost")) {
		if b.before, err = buildBefore(dir, beforeCommit); err != nil {
			return err
		}
	}
	for _, py := range pyfixture.Interpreters {
		if _, err := os.Stat(py.Path); err != nil {
			fmt.Printf("(%s: not installed, %v)\n", py.Name, err)
			continue
		}
		b.pythons = append(b.pythons, py)
	}
	if len(b.pythons) == 0 {
		return errors.New("no CPython interpreter of internal/pyfixture installed")
	}
	fmt.Printf("## Python frames: heatscope record with each interpreter, %d runs (kernel %s)\n\n", b.runs, profrun.KernelRelease())
	fmt.Printf("Load average at the start: %s. Build before Python frames: %s.\n\n", loadavg.Line(), b.before)
	if b.startVs != "" {
		fmt.Printf("New processes also timed with %s, in turns with this tree's build.\n\n", b.startVs)
	}

	cov := map[string][]coverage{}
	costs := map[string][]float64{}        // ns per sample, by interpreter and "native"
	beforeCosts := map[string][]float64{}  // the same with -before's build (-cost-before)
	changes := map[string][]float64{}      // this tree's over -before's, same run
	ratios := map[string][]float64{}       // over native, round by round
	beforeRatios := map[string][]float64{} // the same with -before's build
	lat := map[string][]float64{}          // ms, every process of every run
	never := map[string]int{}
	latVs := map[string][]float64{} // the same with -start-vs
	neverVs := map[string]int{}
	var cpuBefore, cpuAfter, cpuRatio []float64
	// Each build's --cache-dir warmed once (kernel symbols, unwind
	// tables), so that neither's first run builds them alone.
	var warm []string
	for _, bin := range []string{b.before, b.startVs, b.heatscope} {
		if bin != "" && (bin != b.before || b.wants("no-python") || b.costBefore && b.wants("cost")) {
			warm = append(warm, bin)
		}
	}
	for _, bin := range warm {
		a, err := b.record(bin, filepath.Join(b.dir, "warm-"+b.label(bin)), 3*time.Second, 99)
		if err != nil {
			return fmt.Errorf("warm %s's cache: %w", bin, err)
		}
		if err := a.wait(); err != nil {
			return err
		}
	}
	for run := 1; run <= b.runs; run++ {
		fmt.Printf("### Run %d (load %s)\n\n", run, loadavg.OneMinute())
		if b.wants("coverage") {
			for _, py := range b.pythons {
				c, err := b.coverage(py, run)
				if err != nil {
					return fmt.Errorf("run %d, coverage, %s: %w", run, py.Name, err)
				}
				cov[py.Name] = append(cov[py.Name], c)
			}
		}
		if b.wants("cost") {
			// With -cost-before, the two builds side by side on the
			// same processes in the same windows, the first started
			// alternating over the runs (with the same build twice,
			// the first read 1.04× the second at a load of 8).
			bins := []string{b.heatscope}
			if b.costBefore {
				bins = append(bins, b.before)
				if run%2 == 0 {
					slices.Reverse(bins)
				}
			}
			windows, err := b.cost(run, bins)
			if err != nil {
				return fmt.Errorf("run %d, BPF cost: %w", run, err)
			}
			res := windows.results()
			b.printCostRun(bins, res)
			cost := res.ns[b.heatscope]
			for k, v := range cost {
				costs[k] = append(costs[k], v...)
				if k != "native" {
					ratios[k] = append(ratios[k], roundRatios(v, cost["native"])...)
				}
				if before, ok := res.ns[b.before]; ok && b.costBefore {
					beforeCosts[k] = append(beforeCosts[k], before[k]...)
					changes[k] = append(changes[k], roundRatios(v, before[k])...)
					if k != "native" {
						beforeRatios[k] = append(beforeRatios[k], roundRatios(before[k], before["native"])...)
					}
				}
			}
		}
		if b.wants("start") {
			// In turns: the first build of a run alternates.
			bins := []string{b.heatscope}
			if b.startVs != "" {
				bins = append(bins, b.startVs)
				if run%2 == 0 {
					slices.Reverse(bins)
				}
			}
			for _, bin := range bins {
				starts, err := b.start(run, bin)
				if err != nil {
					return fmt.Errorf("run %d, new processes (%s): %w", run, bin, err)
				}
				l, nv := lat, never
				if bin != b.heatscope {
					l, nv = latVs, neverVs
				}
				for k, v := range starts {
					for _, ms := range v {
						if ms < 0 {
							nv[k]++
							continue
						}
						l[k] = append(l[k], ms)
					}
				}
			}
		}
		if b.wants("no-python") {
			cpu, err := b.noPython(run)
			if err != nil {
				return fmt.Errorf("run %d, agent CPU without Python: %w", run, err)
			}
			cpuBefore, cpuAfter = append(cpuBefore, cpu[0]), append(cpuAfter, cpu[1])
			cpuRatio = append(cpuRatio, cpu[1]/cpu[0])
		}
	}

	fmt.Printf("### Medians of %d runs (range); load at the end %s\n\n", b.runs, loadavg.Line())
	fmt.Printf("| interpreter | samples with the whole chain to <module>: all | from its first Python frames on | BPF µs per sample | same-run ratio to native | new process: first sample to first with Python frames, median (max), ms | never had them | code cache hit rate | code cache objects, bytes (bound %d MiB) |\n", pysymbol.DefaultMaxBytes>>20)
	fmt.Printf("|---|---|---|---|---|---|---|---|---|\n")
	for _, py := range b.pythons {
		cs := cov[py.Name]
		all, steady, hit, objs, bytes := field(cs, func(c coverage) float64 { return c.all }), field(cs, func(c coverage) float64 { return c.steady }),
			field(cs, func(c coverage) float64 { return c.hitRate }), field(cs, func(c coverage) float64 { return c.objects }),
			field(cs, func(c coverage) float64 { return c.bytes })
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %d | %s | %s, %s |\n", py.Name,
			medianRange(all, "%.1f%%"), medianRange(steady, "%.1f%%"),
			medianRange(micros(costs[py.Name]), "%.1f"), medianRange(ratios[py.Name], "%.2f×"),
			latencies(lat[py.Name]), never[py.Name], medianRange(hit, "%.2f%%"), medianRange(objs, "%.0f"), medianRange(bytes, "%.0f"))
	}
	fmt.Printf("| native (nofp) | | | %s | | | | | |\n\n", medianRange(micros(costs["native"]), "%.1f"))
	if n, ok := b.verified[b.heatscope]; ok {
		fmt.Printf("The sampler's load: %d instructions processed by the verifier (this tree)", n)
		if m, ok := b.verified[b.before]; ok && b.costBefore {
			fmt.Printf(", %d (%s)", m, b.before)
		}
		fmt.Print(".\n\n")
	}
	if b.startVs != "" {
		fmt.Printf("New processes, first sample to first with Python frames, median (max), ms, in the same runs:\n\n| interpreter | this tree | %s | never had them (this tree, %s) |\n|---|---|---|---|\n", b.startVs, b.startVs)
		for _, py := range b.pythons {
			fmt.Printf("| %s | %s | %s | %d, %d |\n", py.Name, latencies(lat[py.Name]), latencies(latVs[py.Name]), never[py.Name], neverVs[py.Name])
		}
		fmt.Println()
	}
	if len(b.steps) > 0 {
		fmt.Printf("New processes' steps to their first Python frames (-trace), every run, median (max), ms (a build without the agent's \"python set-up\" log has its first and last steps only):\n\n| step | this tree | %s |\n|---|---|---|\n", b.startVs)
		for _, name := range traceStepNames {
			fmt.Printf("| %s | %s | %s |\n", name, latencies(b.steps[b.heatscope][name]), latencies(b.steps[b.startVs][name]))
		}
		fmt.Println()
	}
	if len(costs) > 0 {
		fmt.Printf("BPF cost, every window of every run: µs per sample, and the ratio of two windows of one round (a process over nofp; with -cost-before, this tree over %s's build on the same process in the same window), median (IQR, range, n):\n\n", b.label(b.before))
		fmt.Printf("| process | this tree, µs | over nofp | before, µs | over nofp | this tree / before |\n|---|---|---|---|---|---|\n")
		for _, k := range append(names(b.pythons), "native") {
			fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", k, quartiles(micros(costs[k]), "%.2f"), quartiles(ratios[k], "%.2f×"),
				quartiles(micros(beforeCosts[k]), "%.2f"), quartiles(beforeRatios[k], "%.2f×"), quartiles(changes[k], "%.2f×"))
		}
		fmt.Println()
	}
	if len(cpuRatio) > 0 {
		fmt.Printf("Agent CPU without Python, %% of one CPU (agent + BPF program) over the window: before %s, this tree %s; same-run ratio this tree / before **%s**\n",
			profrun.MedianRange(cpuBefore, "%.2f"), profrun.MedianRange(cpuAfter, "%.2f"), profrun.MedianRange(cpuRatio, "%.2f×"))
	}
	return nil
}

// medianRange is profrun.MedianRange, or "-" for a part not run (-only).
func medianRange(v []float64, format string) string {
	if len(v) == 0 {
		return "-"
	}
	return profrun.MedianRange(v, format)
}

// latencies formats new processes' times to their first Python frames
// (ms) as their median (max) and count, "-" without any.
func latencies(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f (%.0f), %d processes", profrun.Median(slices.Sorted(slices.Values(v))), slices.Max(v), len(v))
}

func micros(ns []float64) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = v / 1000
	}
	return out
}

func field(cs []coverage, f func(coverage) float64) []float64 {
	var out []float64
	for _, c := range cs {
		out = append(out, f(c))
	}
	return out
}

// buildBefore builds heatscope at commit in a temporary worktree.
func buildBefore(dir, commit string) (string, error) {
	wt, bin := filepath.Join(dir, "before-src"), filepath.Join(dir, "heatscope-before")
	if out, err := exec.Command("git", "worktree", "add", "--detach", wt, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %v\n%s", commit, err, out)
	}
	defer exec.Command("git", "worktree", "remove", "--force", wt).Run()
	build := exec.Command("go", "build", "-o", bin, "./cmd/heatscope")
	build.Dir = wt
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", commit, err, out)
	}
	return bin, nil
}

// agent is a running heatscope record.
type agent struct {
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	metrics string
	data    string
}

// record starts bin recording for d (after its set-up) into a new data
// directory under dir, with extra flags, and waits for its /metrics.
func (b *bench) record(bin, dir string, d time.Duration, hz int, extra ...string) (*agent, error) {
	return b.recordEnv(bin, dir, d, hz, nil, extra...)
}

// recordEnv is record with env added to the agent's environment.
func (b *bench) recordEnv(bin, dir string, d time.Duration, hz int, env []string, extra ...string) (*agent, error) {
	port, err := profrun.FreePort()
	if err != nil {
		return nil, err
	}
	a := &agent{data: filepath.Join(dir, "data"), metrics: "http://127.0.0.1:" + port + "/metrics"}
	args := append([]string{"record", "--duration", d.String(), "--frequency", strconv.Itoa(hz), "--data", a.data,
		"--cache-dir", filepath.Join(b.dir, "cache-"+b.label(bin)), "--bpf-stats", "--unwind", "dwarf", "--listen", "127.0.0.1:" + port}, extra...)
	a.cmd = exec.Command(bin, args...)
	if len(env) > 0 {
		a.cmd.Env = append(os.Environ(), env...)
	}
	a.cmd.Stderr = &a.stderr
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	if err := profrun.WaitHTTP(a.metrics, 180*time.Second); err != nil {
		a.cmd.Process.Kill()
		a.cmd.Wait()
		return nil, fmt.Errorf("heatscope record never served /metrics: %w\n%s", err, a.stderr.String())
	}
	return a, nil
}

func (a *agent) wait() error {
	if err := a.cmd.Wait(); err != nil {
		return fmt.Errorf("heatscope record: %v\n%s", err, a.stderr.String())
	}
	return nil
}

// script is heatscope export --format perf-script of a's data.
func (a *agent) script(bin string) ([]byte, error) {
	out, err := exec.Command(bin, "export", "--data", a.data, "--format", "perf-script", "-o", "-").Output()
	if err != nil {
		return nil, fmt.Errorf("heatscope export: %w", err)
	}
	return out, nil
}

// startBusy starts busy.py under py for secs seconds and returns it once
// it printed its ready line.
func (b *bench) startBusy(py pyfixture.Interpreter, secs float64) (*exec.Cmd, int, error) {
	cmd := exec.Command(py.Path, b.busy, strconv.FormatFloat(secs, 'f', -1, 64))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	go io.Copy(io.Discard, out)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, 0, fmt.Errorf("%s busy.py: no ready line: %w", py.Path, err)
	}
	m := regexp.MustCompile(`"pid": (\d+)`).FindSubmatch(line)
	if m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, 0, fmt.Errorf("%s busy.py: no pid in %q", py.Path, line)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	return cmd, pid, nil
}

func stop(cmd *exec.Cmd) {
	cmd.Process.Kill()
	cmd.Wait()
}

// coverage is one interpreter's busy.py recording.
type coverage struct {
	samples        int
	all, steady    float64 // % with the whole chain
	hitRate        float64 // %
	objects, bytes float64
	hits, misses   float64
}

func (b *bench) coverage(py pyfixture.Interpreter, run int) (coverage, error) {
	var c coverage
	dir := filepath.Join(b.dir, fmt.Sprintf("run%d-coverage-%s", run, py.Name))
	busy, pid, err := b.startBusy(py, b.duration.Seconds()+90)
	if err != nil {
		return c, err
	}
	defer stop(busy)
	a, err := b.record(b.heatscope, dir, b.duration, 99, "--pid", strconv.Itoa(pid))
	if err != nil {
		return c, err
	}
	time.Sleep(b.duration - 500*time.Millisecond)
	m, merr := profrun.ReadMetrics(a.metrics)
	if err := a.wait(); err != nil {
		return c, err
	}
	if merr != nil {
		return c, merr
	}
	c.hits, c.misses = m["heatscope_python_code_cache_hits_total"], m["heatscope_python_code_cache_misses_total"]
	c.objects, c.bytes = m["heatscope_python_code_cache_objects"], m["heatscope_python_code_cache_bytes"]
	if c.hits+c.misses > 0 {
		c.hitRate = 100 * c.hits / (c.hits + c.misses)
	}
	out, err := a.script(b.heatscope)
	if err != nil {
		return c, err
	}
	samples := parseScript(out)
	var whole, after, afterWhole int
	seen := false
	for _, s := range samples {
		if s.pid != pid {
			continue
		}
		c.samples++
		ok := wholeChain(s.python)
		if len(s.python) > 0 {
			seen = true
		}
		if ok {
			whole++
		}
		if seen {
			after++
			if ok {
				afterWhole++
			}
		}
	}
	if c.samples == 0 {
		return c, fmt.Errorf("no sample of busy.py (pid %d) in the recording", pid)
	}
	c.all = 100 * float64(whole) / float64(c.samples)
	if after > 0 {
		c.steady = 100 * float64(afterWhole) / float64(after)
	}
	fmt.Printf("- %s coverage: %d samples, %.1f%% with the whole chain (%.1f%% of the %d from its first Python frames on); code cache %.0f hits, %.0f misses, %.0f objects, %.0f bytes\n",
		py.Name, c.samples, c.all, c.steady, after, c.hits, c.misses, c.objects, c.bytes)
	return c, nil
}

// busyChain is busy.py's Python call chain, innermost first.
var busyChain = []string{"inner", "middle", "outer", "<module>"}

// wholeChain says whether python (innermost first) is busy.py's chain
// from wherever it runs down to <module>, no frame missing.
func wholeChain(python []string) bool {
	return len(python) > 0 && len(python) <= len(busyChain) && slices.Equal(python, busyChain[len(busyChain)-len(python):])
}

// sample is one sample of a perf-script export.
type sample struct {
	pid    int
	at     float64 // seconds
	python []string
	// evalLoop is set when a native frame is CPython's evaluation loop
	// (_PyEval_EvalFrameDefault): the process ran Python code, and a
	// sample without Python frames missed them.
	evalLoop bool
}

var scriptHeader = regexp.MustCompile(`^.*?\s(\d+)/\d+\s+\[\d+\]\s+([0-9.]+):`)

// parseScript reads heatscope's perf-script export: each sample's pid,
// time and Python frames (py::NAME:FILE), innermost first.
func parseScript(out []byte) []sample {
	var samples []sample
	var cur *sample
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			cur = nil
			continue
		}
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			m := scriptHeader.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			pid, _ := strconv.Atoi(m[1])
			at, _ := strconv.ParseFloat(m[2], 64)
			samples = append(samples, sample{pid: pid, at: at})
			cur = &samples[len(samples)-1]
			continue
		}
		if cur == nil {
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 && f[1] == "_PyEval_EvalFrameDefault" {
			cur.evalLoop = true
		}
		if len(f) < 2 || !strings.HasPrefix(f[1], "py::") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(f[1], "py::"), ":")
		cur.python = append(cur.python, name)
	}
	return samples
}

func names(ps []pyfixture.Interpreter) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// start records the whole machine with the heatscope binary bin while
// -spawn busy.py processes of each interpreter start one after another,
// and returns, per interpreter, each process's time in ms from its first
// sample to its first with Python frames (-1: none had them).
func (b *bench) start(run int, bin string) (map[string][]float64, error) {
	const life, gap = 2.0, 400 * time.Millisecond
	// Recorded until every process has exited and a second more, then
	// stopped (SIGINT): the starts take longer than their gaps on a
	// loaded machine.
	trace := b.trace
	var env []string
	if trace {
		env = []string{"HEATSCOPE_LOG_LEVEL=debug"}
	}
	a, err := b.recordEnv(bin, filepath.Join(b.dir, fmt.Sprintf("run%d-start-%s", run, b.label(bin))), 0, 99, env)
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	pids := map[int]string{}
	spawned := map[int]float64{} // Unix s, just before the fork and exec
	var started []*exec.Cmd
	var startErr error
	for range b.spawn {
		for _, py := range b.pythons {
			at := float64(time.Now().UnixNano()) / 1e9
			cmd, pid, err := b.startBusy(py, life)
			if err != nil {
				startErr = err
				break
			}
			pids[pid], spawned[pid] = py.Name, at
			started = append(started, cmd)
			time.Sleep(gap)
		}
	}
	for _, c := range started {
		c.Wait()
	}
	time.Sleep(time.Second)
	a.cmd.Process.Signal(os.Interrupt)
	if err := errors.Join(a.wait(), startErr); err != nil {
		return nil, err
	}
	out, err := a.script(b.heatscope)
	if err != nil {
		return nil, err
	}
	f := map[int]*firsts{}
	for _, s := range parseScript(out) {
		if _, ok := pids[s.pid]; !ok {
			continue
		}
		p := f[s.pid]
		if p == nil {
			p = &firsts{first: s.at, python: math.NaN(), named: math.NaN(), running: math.NaN()}
			f[s.pid] = p
		}
		if (s.evalLoop || len(s.python) > 0) && (math.IsNaN(p.running) || s.at < p.running) {
			p.running = s.at
		}
		if s.evalLoop && len(s.python) == 0 {
			p.missed = append(p.missed, s.at)
		}
		p.first = min(p.first, s.at)
		if len(s.python) > 0 && (math.IsNaN(p.python) || s.at < p.python) {
			p.python = s.at
		}
		if slices.ContainsFunc(s.python, func(n string) bool { return !strings.HasPrefix(n, "[") }) && (math.IsNaN(p.named) || s.at < p.named) {
			p.named = s.at
		}
	}
	res := map[string][]float64{}
	unsampled := 0
	for pid, name := range pids {
		p := f[pid]
		switch {
		case p == nil:
			unsampled++
		case math.IsNaN(p.python):
			res[name] = append(res[name], -1)
		default:
			res[name] = append(res[name], 1000*(p.python-p.first))
		}
	}
	fmt.Printf("- new processes (%s): %d started, %d never sampled; ms from the first sample to the first with Python frames:", b.label(bin), len(pids), unsampled)
	for _, n := range names(b.pythons) {
		v := slices.Sorted(slices.Values(res[n]))
		fmt.Printf(" %s %v", n, roundAll(v))
	}
	fmt.Println()
	if trace {
		b.traceSteps(bin, parseSetUps(a.stderr.Bytes()), pids, spawned, f)
	}
	return res, nil
}

// firsts is a process's first sample, its first with Python frames, its
// first with a Python frame named (not "[python+0x…]": its code object
// read) and its first running Python (with Python frames, or the
// evaluation loop among its native frames), Unix s (NaN: none); missed
// holds the times of its samples that ran the evaluation loop and have
// no Python frames.
type firsts struct {
	first, python, named, running float64
	missed                        []float64
}

// setUp is one "python set-up" line of the agent's debug log: the times
// (Unix s) of a process's request taken out of unwind_pending, of the end
// of the drain before its set-up, of the set-up's start and of its entry
// written, and whether the entry names an interpreter.
type setUp struct {
	pid                            int
	by                             string
	taken, drained, start, written float64
	interpreter                    bool
}

var setUpLine = regexp.MustCompile(`msg="python set-up" pid=(\d+) by="?([a-z ]+?)"? taken_ns=(\d+) last_taken_ns=\d+ drained_ns=(-?\d+) start_ns=(\d+) written_ns=(\d+) interpreter=(true|false)`)

// parseSetUps reads the agent's "python set-up" lines, in their order.
func parseSetUps(log []byte) []setUp {
	var out []setUp
	for _, m := range setUpLine.FindAllSubmatch(log, -1) {
		pid, _ := strconv.Atoi(string(m[1]))
		ns := func(b []byte) float64 { v, _ := strconv.ParseInt(string(b), 10, 64); return float64(v) / 1e9 }
		out = append(out, setUp{pid: pid, by: string(m[2]), taken: ns(m[3]), drained: ns(m[4]), start: ns(m[5]), written: ns(m[6]), interpreter: string(m[7]) == "true"})
	}
	return out
}

// The steps of -trace, in their order.
var traceStepNames = []string{
	"exec → first sample",
	"first sample → request taken (the wake, or the poll)",
	"request taken → end of the drain that read it",
	"end of the drain → set-up starts",
	"set-up → entry written",
	"first entry without an interpreter → entry with one",
	"entry with an interpreter → first sample with Python frames",
	"first sample → first with Python frames",
	"first sample → first with a Python frame named",
	"first sample running Python (Python frames, or the evaluation loop) → first with Python frames",
	"samples that ran the evaluation loop without Python frames, per process (a count, not ms)",
}

// traceSteps prints the steps of each new process's time to its first
// Python frames in one run (medians and max, ms), and keeps them for the
// runs' summary (b.steps). A process's first set-up line is its first
// request's; an entry written before its interpreter was mapped (a
// libpython build sampled in its dynamic loader) has a second.
func (b *bench) traceSteps(bin string, setUps []setUp, pids map[int]string, spawned map[int]float64, f map[int]*firsts) {
	if b.steps == nil {
		b.steps = map[string]map[string][]float64{}
	}
	if b.steps[bin] == nil {
		b.steps[bin] = map[string][]float64{}
	}
	first, withInterp := map[int]setUp{}, map[int]setUp{}
	for _, s := range setUps {
		if _, ok := first[s.pid]; !ok {
			first[s.pid] = s
		}
		if _, ok := withInterp[s.pid]; !ok && s.interpreter {
			withInterp[s.pid] = s
		}
	}
	run := map[string][]float64{}
	add := func(step string, from, to float64) {
		if from > 0 && to > 0 && !math.IsNaN(from) && !math.IsNaN(to) {
			run[step] = append(run[step], 1000*(to-from))
		}
	}
	var noSetUp, late, byPoll, missedProcs, missed int
	for pid := range pids {
		p := f[pid]
		if p == nil {
			continue
		}
		add(traceStepNames[0], spawned[pid], p.first)
		add(traceStepNames[7], p.first, p.python)
		add(traceStepNames[8], p.first, p.named)
		add(traceStepNames[9], p.running, p.python)
		run[traceStepNames[10]] = append(run[traceStepNames[10]], float64(len(p.missed)))
		if len(p.missed) > 0 {
			missedProcs++
			missed += len(p.missed)
		}
		s, ok := first[pid]
		if !ok {
			noSetUp++
			continue
		}
		if s.by == "poll" {
			byPoll++
		}
		add(traceStepNames[1], p.first, s.taken)
		if s.drained >= s.taken {
			add(traceStepNames[2], s.taken, s.drained)
			add(traceStepNames[3], s.drained, s.start)
		}
		add(traceStepNames[4], s.start, s.written)
		if w, ok := withInterp[pid]; ok {
			if !s.interpreter {
				late++
				add(traceStepNames[5], s.written, w.written)
			}
			add(traceStepNames[6], w.written, p.python)
		}
	}
	fmt.Printf("- steps (-trace): %d processes sampled without a set-up line, %d set up first by the worker's poll, %d whose first entry named no interpreter; "+
		"%d samples of %d processes ran the evaluation loop without Python frames (missed them); median (max), ms:\n", noSetUp, byPoll, late, missed, missedProcs)
	for _, name := range traceStepNames {
		fmt.Printf("  - %s: %s\n", name, latencies(run[name]))
		b.steps[bin][name] = append(b.steps[bin][name], run[name]...)
	}
}

func roundAll(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(math.Round(x))
	}
	return out
}

// noPython records the whole machine running two native CPU-bound
// processes with the build from before Python frames and with this
// tree's, in turns (the order alternating over the runs), and returns the
// agent's CPU (its own and its BPF program's) over the window from
// -warm-up to the end, in % of one CPU: before, this tree.
func (b *bench) noPython(run int) ([2]float64, error) {
	var out [2]float64
	var spins []*exec.Cmd
	for range 2 {
		s := exec.Command(b.spinner)
		if err := s.Start(); err != nil {
			return out, err
		}
		spins = append(spins, s)
	}
	defer func() {
		for _, s := range spins {
			stop(s)
		}
	}()
	order := []int{0, 1}
	if run%2 == 0 {
		order = []int{1, 0}
	}
	for _, i := range order {
		bin := []string{b.before, b.heatscope}[i]
		a, err := b.record(bin, filepath.Join(b.dir, fmt.Sprintf("run%d-cpu-%d", run, i)), b.cpuDuration, 99)
		if err != nil {
			return out, err
		}
		time.Sleep(b.warmUp)
		if n := pythonProcesses(); n > 0 {
			fmt.Printf("- (run %d, %s: %d Python processes of others running during the record without Python)\n", run, []string{"before", "this tree"}[i], n)
		}
		t0 := time.Now()
		c0, errA := profrun.ProcessCPU(a.cmd.Process.Pid)
		m0, errB := profrun.ReadMetrics(a.metrics)
		time.Sleep(b.cpuDuration - b.warmUp - 500*time.Millisecond)
		c1, errC := profrun.ProcessCPU(a.cmd.Process.Pid)
		m1, errD := profrun.ReadMetrics(a.metrics)
		t1 := time.Now()
		if err := a.wait(); err != nil {
			return out, err
		}
		if err := errors.Join(errA, errB, errC, errD); err != nil {
			return out, err
		}
		bpf := m1["heatscope_bpf_program_seconds_total"] - m0["heatscope_bpf_program_seconds_total"]
		out[i] = 100 * ((c1 - c0).Seconds() + bpf) / t1.Sub(t0).Seconds()
	}
	fmt.Printf("- agent CPU without Python (agent + BPF, %% of one CPU): before %.2f, this tree %.2f, ratio %.2f×\n", out[0], out[1], out[1]/out[0])
	return out, nil
}

// pythonProcesses counts the machine's processes running a python
// executable (others' work on a shared machine: the record "without
// Python" is not, while they run).
func pythonProcesses() int {
	n := 0
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, exe := range exes {
		if target, err := os.Readlink(exe); err == nil && strings.HasPrefix(filepath.Base(target), "python") {
			n++
		}
	}
	return n
}
