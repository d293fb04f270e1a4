// Command sampler benchmarks heatscope's sampler against perf on the same
// workload, at the same time: a C program, a Go program and a kernel-heavy
// dd keep both CPUs busy while `heatscope record` and `perf record -F 99 -a
// -g` both sample them. It prints a markdown report: samples received
// against expected, ring-buffer drops, each profiler's CPU time (heatscope's
// including the BPF program's run time), peak RSS, and the top leaf functions
// of both side by side.
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
)

func main() {
	duration := flag.Duration("duration", 30*time.Second, "how long both profilers record")
	frequency := flag.Int("frequency", 99, "sampling frequency in Hz")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*duration, *frequency); err != nil {
		log.Fatalf("sampler benchmark: %v", err)
	}
}

// usage is what a finished process cost.
type usage struct {
	cpu    time.Duration
	maxRSS int64 // bytes
}

func usageOf(ps *os.ProcessState) usage {
	ru := ps.SysUsage().(*syscall.Rusage)
	return usage{
		cpu:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSS: ru.Maxrss * 1024,
	}
}

func must(cmd *exec.Cmd) {
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

func run(duration time.Duration, hz int) error {
	dir, err := os.MkdirTemp("", "heatscope-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "heatscope")
	must(exec.Command("go", "build", "-o", bin, "./cmd/heatscope"))
	hotc := filepath.Join(dir, "hotc")
	must(exec.Command("gcc", "-O0", "-fno-omit-frame-pointer", "-o", hotc, "cmd/heatscope/testdata/hotc.c"))
	hotgo := filepath.Join(dir, "hotgo")
	must(exec.Command("go", "build", "-o", hotgo, "./cmd/heatscope/testdata/hotgo"))

	var workload []*exec.Cmd
	for _, args := range [][]string{{hotc}, {hotgo}, {"dd", "if=/dev/zero", "of=/dev/null", "bs=1"}} {
		c := exec.Command(args[0], args[1:]...)
		if err := c.Start(); err != nil {
			return err
		}
		workload = append(workload, c)
	}
	defer func() {
		for _, c := range workload {
			c.Process.Kill()
			c.Wait()
		}
	}()
	time.Sleep(time.Second)

	hsOut := filepath.Join(dir, "heatscope.pb.gz")
	hsData := filepath.Join(dir, "data")
	// The agent runs as deployed: recording into its data directory only.
	// Its profile for the leaf comparison is exported afterwards.
	hs := exec.Command(bin, "record", "--duration", duration.String(), "--frequency", strconv.Itoa(hz),
		"--data", hsData, "--bpf-stats", "--progress", "0", "--top", "0")
	var hsErr bytes.Buffer
	hs.Stderr = &hsErr
	perfData := filepath.Join(dir, "perf.data")
	perf := exec.Command("perf", "record", "-F", strconv.Itoa(hz), "-a", "-g", "-o", perfData,
		"--", "sleep", strconv.FormatFloat(duration.Seconds(), 'f', -1, 64))
	var perfErr bytes.Buffer
	perf.Stderr = &perfErr
	if err := hs.Start(); err != nil {
		return err
	}
	if err := perf.Start(); err != nil {
		return err
	}
	if err := hs.Wait(); err != nil {
		return fmt.Errorf("heatscope record: %v\n%s", err, hsErr.String())
	}
	if err := perf.Wait(); err != nil {
		return fmt.Errorf("perf record: %v\n%s", err, perfErr.String())
	}
	hsUse, perfUse := usageOf(hs.ProcessState), usageOf(perf.ProcessState)
	must(exec.Command(bin, "export", "--data", hsData, "--idle", "include", "-o", hsOut))

	summary := hsErr.String()
	received := intAfter(summary, `recorded [0-9.]+s: (\d+) samples`)
	dropped := intAfter(summary, `(\d+) dropped`)
	bpfRuns := intAfter(summary, `BPF program: (\d+) runs`)
	bpfTime := floatAfter(summary, `runs, ([0-9.]+)s`)
	recorded := floatAfter(summary, `recorded ([0-9.]+)s`)

	hsLeaves, err := heatscopeLeaves(hsOut)
	if err != nil {
		return err
	}
	perfLeaves, err := perfLeaves(perfData)
	if err != nil {
		return err
	}

	cpus := runtime.NumCPU()
	expected := duration.Seconds() * float64(hz) * float64(cpus)
	hsCPU := hsUse.cpu.Seconds() + bpfTime
	fmt.Printf("## Sampler: heatscope vs perf, %v at %d Hz on %d busy CPUs (kernel %s)\n\n", duration, hz, cpus, kernelRelease())
	fmt.Printf("| metric | value | target |\n|---|---|---|\n")
	fmt.Printf("| samples received / expected | %d / %.0f = %.1f%% | >= 97%% |\n", received, expected, 100*float64(received)/expected)
	fmt.Printf("| ring-buffer drops | %d | 0 |\n", dropped)
	fmt.Printf("| heatscope agent CPU (user+sys) | %.3f s | |\n", hsUse.cpu.Seconds())
	fmt.Printf("| BPF program run time | %.3f s (%d runs, %.1f µs/run) | |\n", bpfTime, bpfRuns, 1e6*bpfTime/math.Max(1, float64(bpfRuns)))
	fmt.Printf("| heatscope CPU incl. BPF, %% of one CPU | %.3f%% | <= 0.5%% |\n", 100*hsCPU/recorded)
	fmt.Printf("| heatscope peak RSS | %.1f MB | <= 60 MB |\n", float64(hsUse.maxRSS)/1e6)
	fmt.Printf("| perf record CPU (user+sys), %% of one CPU | %.3f s, %.3f%% | |\n", perfUse.cpu.Seconds(), 100*perfUse.cpu.Seconds()/duration.Seconds())
	fmt.Printf("| perf record peak RSS | %.1f MB | |\n", float64(perfUse.maxRSS)/1e6)
	fmt.Printf("| CPU ratio heatscope (incl. BPF) / perf | %.2f | <= 0.5 |\n\n", hsCPU/perfUse.cpu.Seconds())

	storeBytes, err := dirSize(hsData)
	if err != nil {
		return err
	}
	perfInfo, err := os.Stat(perfData)
	if err != nil {
		return err
	}
	perfSamples, err := perfSampleCount(perfData)
	if err != nil {
		return err
	}
	fmt.Printf("### On disk\n\n| recorder | bytes | samples | bytes/sample |\n|---|---|---|---|\n")
	fmt.Printf("| heatscope data directory | %d | %d | %.2f |\n", storeBytes, received, float64(storeBytes)/float64(received))
	fmt.Printf("| perf record -g perf.data | %d | %d | %.1f |\n\n", perfInfo.Size(), perfSamples, float64(perfInfo.Size())/float64(perfSamples))

	fmt.Printf("### Top-10 leaf functions (self %% of all samples)\n\n")
	fmt.Printf("| heatscope leaf | heatscope | perf | difference |\n|---|---|---|---|\n")
	worst := 0.0
	for _, l := range hsLeaves[:min(10, len(hsLeaves))] {
		p := perfLeafShare(perfLeaves, l.name)
		worst = math.Max(worst, math.Abs(l.pct-p))
		fmt.Printf("| `%s` | %.2f%% | %.2f%% | %+.2f pp |\n", l.name, l.pct, p, l.pct-p)
	}
	fmt.Printf("\nLargest difference: %.2f percentage points (target <= 2).\n\n", worst)
	fmt.Printf("perf's own top 10 for reference:\n\n| perf leaf | perf |\n|---|---|\n")
	for _, l := range perfLeaves[:min(10, len(perfLeaves))] {
		fmt.Printf("| `%s` | %.2f%% |\n", l.name, l.pct)
	}
	return nil
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

// perfSampleCount counts the samples in a perf.data file.
func perfSampleCount(path string) (int, error) {
	out, err := exec.Command("perf", "script", "-i", path, "-F", "time").Output()
	if err != nil {
		return 0, fmt.Errorf("perf script: %w", err)
	}
	return bytes.Count(out, []byte("\n")), nil
}

type leaf struct {
	name string
	pct  float64
}

func heatscopeLeaves(path string) ([]leaf, error) {
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
		total += s.Value[0]
		name := "[no frames]"
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 {
			name = s.Location[0].Line[0].Function.Name
		}
		counts[name] += s.Value[0]
	}
	return sortLeaves(counts, total), nil
}

// perfLeaves reads `perf report --no-children` leaf percentages.
func perfLeaves(path string) ([]leaf, error) {
	out, err := exec.Command("perf", "report", "-i", path, "--no-children", "--sort", "sym",
		"--stdio", "-g", "none", "--percent-limit", "0.01").Output()
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

// perfLeafShare finds name in perf's leaves; perf shows unresolved user
// frames as hex addresses where heatscope shows [module+0xoffset].
func perfLeafShare(leaves []leaf, name string) float64 {
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

func intAfter(s, re string) int64 {
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		log.Fatalf("no %q in heatscope's summary:\n%s", re, s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

func floatAfter(s, re string) float64 {
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		log.Fatalf("no %q in heatscope's summary:\n%s", re, s)
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

func kernelRelease() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "unknown"
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
