package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bench/internal/profrun"
)

// The BPF cost per sample is measured in windows: every measured process
// (the native nofp and each interpreter's busy.py) is started once per
// run, pinned with the agents to one CPU (-cost-cpu) and stopped
// (SIGSTOP); one agent per build records all of them at once (--pid, at
// -cost-hz, the second agent 5 Hz over), the builds side by side, each
// with its own program and its own run-time counters. A round lets each process run alone for one window
// (SIGCONT, -cost-window, SIGSTOP), and one window with none of them (the
// idle window: every run of the program is then one its pid filter
// skipped), in an order that turns from round to round. Each window's
// cost per sample is its program's run time less its filtered runs' (at
// the run's median idle cost per run), over the samples it took, read
// from each agent's /metrics at the window's start and end. A process is
// compared with nofp (and a build with the other) within one round, a
// few seconds apart on the same CPU, and the figures are the medians of
// those per-round ratios with their quartiles: on this VM the program's
// time per sample moved by ±50% from one window of seconds to the next,
// more than the changes measured, and the ratio of two windows far apart
// carried that spread whole.

// costWindow is what one agent's counters moved by over one window.
type costWindow struct {
	ns, runs, samples float64
}

func (w costWindow) sub(m0, m1 map[string]float64) costWindow {
	return costWindow{
		ns:      1e9 * (m1["heatscope_bpf_program_seconds_total"] - m0["heatscope_bpf_program_seconds_total"]),
		runs:    m1["heatscope_bpf_program_runs_total"] - m0["heatscope_bpf_program_runs_total"],
		samples: m1["heatscope_samples_total"] - m0["heatscope_samples_total"],
	}
}

// perSample is the window's ns per sample with filtered ns per run taken
// out of the runs that took no sample, or NaN without samples.
func (w costWindow) perSample(filtered float64) float64 {
	if w.samples <= 0 {
		return nan
	}
	return (w.ns - filtered*(w.runs-w.samples)) / w.samples
}

// costRun is one run's windows: by build, by process name ("idle",
// "native", an interpreter's), one per round.
type costRun map[string]map[string][]costWindow

// idleName names the window in which no measured process runs.
const idleName = "idle"

// costResult is a run's per-sample costs in ns, by build and process
// name, one per round (NaN: the window took no sample), and each build's
// pid filter cost per skipped run.
type costResult struct {
	ns       map[string]map[string][]float64
	filtered map[string]float64
}

// results turns a run's windows into costs per sample.
func (r costRun) results() costResult {
	out := costResult{ns: map[string]map[string][]float64{}, filtered: map[string]float64{}}
	for bin, byName := range r {
		var idle []float64
		for _, w := range byName[idleName] {
			if w.runs > 0 {
				idle = append(idle, w.ns/w.runs)
			}
		}
		f := nan
		if len(idle) > 0 {
			f = profrun.Median(slices.Sorted(slices.Values(idle)))
		}
		out.filtered[bin] = f
		out.ns[bin] = map[string][]float64{}
		for name, ws := range byName {
			if name == idleName {
				continue
			}
			for _, w := range ws {
				out.ns[bin][name] = append(out.ns[bin][name], w.perSample(f))
			}
		}
	}
	return out
}

// roundRatios divides a by b round by round, leaving out rounds where either
// is not a number or b is not positive.
func roundRatios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if a[i] == a[i] && b[i] == b[i] && b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// quartiles formats the median of v with its quartiles and range:
// "1.52× (IQR 1.40-1.61, 1.20-1.95, n 30)".
func quartiles(v []float64, format string) string {
	var s []float64
	for _, x := range v {
		if x == x {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return "-"
	}
	slices.Sort(s)
	q := func(p float64) float64 {
		i := p * float64(len(s)-1)
		lo := int(i)
		if lo+1 >= len(s) {
			return s[lo]
		}
		return s[lo] + (i-float64(lo))*(s[lo+1]-s[lo])
	}
	return fmt.Sprintf(format+" (IQR "+format+"-"+format+", "+format+"-"+format+", n %d)", q(0.5), q(0.25), q(0.75), s[0], s[len(s)-1], len(s))
}

// measured is one process whose cost is measured.
type measured struct {
	name string
	cmd  *exec.Cmd
	pid  int
}

// cost measures one run: it starts nofp and each interpreter's busy.py,
// one agent per build of bins recording all of them, and lets each
// process run alone for -cost-window in each of -cost-rounds rounds.
func (b *bench) cost(run int, bins []string) (costRun, error) {
	var procs []measured
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGCONT)
			stop(p.cmd)
		}
	}()
	spin := exec.Command(b.spinner)
	if err := spin.Start(); err != nil {
		return nil, err
	}
	procs = append(procs, measured{"native", spin, spin.Process.Pid})
	// Long enough for the warm-up and the rounds on a loaded machine.
	secs := 600 + float64(b.costRounds*(len(b.pythons)+2))*b.costWindowLen.Seconds()*2
	for _, py := range b.pythons {
		cmd, pid, err := b.startBusy(py, secs)
		if err != nil {
			return nil, err
		}
		procs = append(procs, measured{py.Name, cmd, pid})
	}
	var pids []string
	for _, p := range procs {
		if err := b.pinAndFavour(p.pid); err != nil {
			return nil, err
		}
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("stop %s: %w", p.name, err)
		}
		pids = append(pids, strconv.Itoa(p.pid))
	}
	var agents []*agent
	defer func() {
		for _, a := range agents {
			a.cmd.Process.Kill()
			a.cmd.Wait()
		}
	}()
	for i, bin := range bins {
		// Each agent at its own frequency, 5 Hz apart: at one
		// frequency the two programs' samples kept one phase for the
		// whole run, and the one that ran just after the other found
		// the caches it had warmed (the same build twice read 1.06×
		// to 1.27× apart by its order, all processes alike); 5 Hz
		// apart, their phase goes round once every 200 ms, within
		// each window.
		a, err := b.record(bin, filepath.Join(b.dir, fmt.Sprintf("run%d-cost-%s", run, b.label(bin))), 0, b.costHz+5*i, "--pid", strings.Join(pids, ","))
		if err != nil {
			return nil, err
		}
		agents = append(agents, a)
		if err := b.pinAndFavour(a.cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	// Warm-up: every process runs (each first sample has the agents
	// read its mappings, build or load its tables and set up its
	// interpreter), then is stopped again.
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	time.Sleep(b.warmUp)
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGSTOP)
	}
	for i, bin := range bins {
		if _, ok := b.verified[bin]; !ok {
			n, err := profrun.VerifiedInstructions(agents[i].cmd.Process.Pid)
			if err != nil {
				fmt.Fprintf(os.Stderr, "(%s: %v)\n", b.label(bin), err)
			}
			b.verified[bin] = n
		}
	}
	out := costRun{}
	for _, bin := range bins {
		out[bin] = map[string][]costWindow{}
	}
	order := append([]*measured{nil}, ptrs(procs)...) // nil: the idle window
	for round := range b.costRounds {
		for k := range order {
			p := order[(k+round)%len(order)]
			name := idleName
			if p != nil {
				name = p.name
				if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					return nil, fmt.Errorf("continue %s: %w", p.name, err)
				}
			}
			ws, err := b.window(agents)
			if p != nil {
				p.cmd.Process.Signal(syscall.SIGSTOP)
			}
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, name, err)
			}
			for i, bin := range bins {
				out[bin][name] = append(out[bin][name], ws[i])
			}
		}
	}
	for _, a := range agents {
		a.cmd.Process.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, a := range agents {
		errs = append(errs, a.wait())
	}
	agents = nil
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func ptrs(ps []measured) []*measured {
	out := make([]*measured, len(ps))
	for i := range ps {
		out[i] = &ps[i]
	}
	return out
}

// window reads every agent's counters, waits -cost-window and reads them
// again. The first read is a short while after the window's process was
// continued, so that the window holds its runs only.
func (b *bench) window(agents []*agent) ([]costWindow, error) {
	time.Sleep(20 * time.Millisecond)
	m0 := make([]map[string]float64, len(agents))
	for i, a := range agents {
		m, err := profrun.ReadMetrics(a.metrics)
		if err != nil {
			return nil, err
		}
		m0[i] = m
	}
	time.Sleep(b.costWindowLen)
	out := make([]costWindow, len(agents))
	for i, a := range agents {
		m, err := profrun.ReadMetrics(a.metrics)
		if err != nil {
			return nil, err
		}
		out[i] = costWindow{}.sub(m0[i], m)
	}
	return out, nil
}

// pinAndFavour pins every thread of process pid to -cost-cpu (threads it
// starts later inherit it) and gives them -cost-nice: on a busy machine a
// process at the default priority runs a small part of the time, so that
// most of the program's runs are the pid filter's, whose cost taken out
// of them buries the samples' own in its noise.
func (b *bench) pinAndFavour(pid int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("threads of process %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if b.costCPU >= 0 {
			var set unix.CPUSet
			set.Set(b.costCPU)
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				return fmt.Errorf("pin thread %d of process %d to CPU %d: %w", tid, pid, b.costCPU, err)
			}
		}
		if b.costNice != 0 {
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, b.costNice); err != nil {
				return fmt.Errorf("set thread %d of process %d's nice value to %d: %w", tid, pid, b.costNice, err)
			}
		}
	}
	return nil
}

var nan = math.NaN()

// printCostRun prints a run's medians per build and process, with the
// ratios to nofp round by round.
func (b *bench) printCostRun(bins []string, res costResult) {
	for _, bin := range bins {
		fmt.Printf("- BPF cost (%s, its sampler %d instructions verified): the pid filter %.0f ns a skipped run; µs per sample, median of %d windows, and over nofp in the same round:", b.label(bin), b.verified[bin], res.filtered[bin], b.costRounds)
		ns := res.ns[bin]
		for _, k := range append([]string{"native"}, names(b.pythons)...) {
			fmt.Printf(" %s %s", k, quartiles(micros(ns[k]), "%.2f"))
			if k != "native" {
				fmt.Printf(" %s", quartiles(roundRatios(ns[k], ns["native"]), "%.2f×"))
			}
			fmt.Print(";")
		}
		fmt.Println()
	}
	fmt.Println()
}
