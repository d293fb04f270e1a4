// Package profrun holds what the benchmarks that set heatscope record
// beside perf record share: the command lines, what a finished process
// cost, heatscope's summary, a process's CPU time while it runs, whose
// samples reach main, and medians.
package profrun

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// Usage is what a finished process cost.
type Usage struct {
	CPU    time.Duration // user + system
	MaxRSS int64         // bytes
}

// UsageOf reads a finished process's Usage.
func UsageOf(ps *os.ProcessState) Usage {
	ru := ps.SysUsage().(*syscall.Rusage)
	return Usage{
		CPU:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		MaxRSS: ru.Maxrss * 1024,
	}
}

// PerfCmd is perf record on the whole machine for duration, into out,
// with call graphs of the kind given (["-g"] for frame pointers).
func PerfCmd(duration time.Duration, hz int, out string, callGraph ...string) *exec.Cmd {
	args := append([]string{"record", "-F", strconv.Itoa(hz), "-a"}, callGraph...)
	args = append(args, "-o", out, "--", "sleep", strconv.FormatFloat(duration.Seconds(), 'f', -1, 64))
	return exec.Command("perf", args...)
}

// Summary is what heatscope record's summary on stderr says.
type Summary struct {
	Received, Dropped, BPFRuns int64
	// ExitRuns counts the exit snapshot program's runs (0 when it was not
	// loaded).
	ExitRuns int64
	// BPFTime is the sampler program's run time, ExitTime the exit
	// snapshot program's (0 when it was not loaded), Recorded how long
	// it recorded; in seconds.
	BPFTime, ExitTime, Recorded float64
}

// ParseSummary reads heatscope record's summary (run with --bpf-stats).
func ParseSummary(s string) (Summary, error) {
	var sum Summary
	var err error
	ints := []struct {
		to *int64
		re string
	}{
		{&sum.Received, `recorded [0-9.]+s: (\d+) samples`},
		{&sum.Dropped, `(\d+) dropped`},
		{&sum.BPFRuns, `BPF program: (\d+) runs`},
	}
	for _, f := range ints {
		m := regexp.MustCompile(f.re).FindStringSubmatch(s)
		if m == nil {
			return sum, fmt.Errorf("no %q in heatscope's summary:\n%s", f.re, s)
		}
		*f.to, _ = strconv.ParseInt(m[1], 10, 64)
	}
	floats := []struct {
		to       *float64
		re       string
		optional bool
	}{
		{&sum.BPFTime, `BPF program: \d+ runs, ([0-9.]+)s`, false},
		{&sum.Recorded, `recorded ([0-9.]+)s`, false},
		{&sum.ExitTime, `exit snapshots: \d+ runs, ([0-9.]+)s`, true},
	}
	if m := regexp.MustCompile(`exit snapshots: (\d+) runs`).FindStringSubmatch(s); m != nil {
		sum.ExitRuns, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, f := range floats {
		m := regexp.MustCompile(f.re).FindStringSubmatch(s)
		if m == nil {
			if f.optional {
				continue
			}
			return sum, fmt.Errorf("no %q in heatscope's summary:\n%s", f.re, s)
		}
		if *f.to, err = strconv.ParseFloat(m[1], 64); err != nil {
			return sum, fmt.Errorf("%q in heatscope's summary: %w", f.re, err)
		}
	}
	return sum, nil
}

// Median is the median of sorted values.
func Median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// MedianRange formats the median and range of v as "median (min-max)",
// each with format.
func MedianRange(v []float64, format string) string {
	v = slices.Sorted(slices.Values(v))
	return fmt.Sprintf(format+" ("+format+"-"+format+")", Median(v), v[0], v[len(v)-1])
}

// KernelRelease is uname -r.
func KernelRelease() string {
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

// ProcessCPU returns the time process pid has spent on a CPU (user and
// system), its threads that exited included, to the nanosecond: the
// process's CPU-time clock (clock_getcpuclockid(3)), which the kernel
// keeps as the exited threads' sum plus each live thread's. Summing
// /proc/PID/task/*/schedstat instead loses a thread that exits between
// two reads (the figure comes out low, even negative), and /proc/PID/stat
// counts in clock ticks (10 ms).
func ProcessCPU(pid int) (time.Duration, error) {
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's and
	// glibc's headers: the whole process, not one thread.
	const cpuClockSched = 2
	clock := int32(^uint32(pid)<<3) | cpuClockSched
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// VerifiedInstructions returns how many instructions the kernel's
// verifier processed to load the perf_event program process pid holds
// (heatscope record's sampler), read from its file descriptors' fdinfo
// (verified_insns, Linux 5.16 on), or an error when it holds none.
func VerifiedInstructions(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("verified instructions: %w", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed since the listing
		}
		if n, ok := perfEventVerified(b); ok {
			return n, nil
		}
	}
	return 0, fmt.Errorf("verified instructions: process %d holds no perf_event program with verified_insns", pid)
}

// perfEventVerified returns verified_insns of one fdinfo file if it is a
// perf_event program's (prog_type 7, BPF_PROG_TYPE_PERF_EVENT).
func perfEventVerified(fdinfo []byte) (int, bool) {
	fields := map[string]string{}
	for _, line := range strings.Split(string(fdinfo), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["prog_type"] != "7" {
		return 0, false
	}
	n, err := strconv.Atoi(fields["verified_insns"])
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// ScriptReachMain reads heatscope's perf script export of the workload's
// samples and returns their number, the share whose stack has main, and
// the longest time over the processes from a process's first sample to
// its first that has main (-1 if one never had it).
func ScriptReachMain(script []byte) (int, float64, time.Duration) {
	type proc struct{ first, whole float64 }
	procs := map[string]*proc{}
	n, main := 0, 0
	var cur *proc
	var at float64
	hasMain := false
	flush := func() {
		if cur == nil {
			return
		}
		n++
		if hasMain {
			main++
			if cur.whole < 0 {
				cur.whole = at
			}
		}
		cur, hasMain = nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != '\t':
			// "comm pid/tid [cpu] seconds.micros: period cpu-clock:"
			flush()
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			t, err := strconv.ParseFloat(strings.TrimSuffix(f[3], ":"), 64)
			if err != nil {
				continue
			}
			pid, _, _ := strings.Cut(f[1], "/")
			if procs[pid] == nil {
				procs[pid] = &proc{first: t, whole: -1}
			}
			cur, at = procs[pid], t
		default:
			if f := strings.Fields(line); len(f) >= 2 && f[1] == "main" {
				hasMain = true
			}
		}
	}
	flush()
	if n == 0 {
		return 0, 0, -1
	}
	var longest time.Duration
	for _, p := range procs {
		if p.whole < 0 {
			return n, float64(main) / float64(n), -1
		}
		longest = max(longest, time.Duration((p.whole-p.first)*1e9))
	}
	return n, float64(main) / float64(n), longest
}

// PerfReachMain runs perf script and counts the samples, those of comm,
// and the share of those whose stack has main.
func PerfReachMain(data, comm string) (int, float64, float64, error) {
	cmd := exec.Command("perf", "script", "-i", data, "-F", "comm,ip,sym")
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("perf script: %w", err)
	}
	var total, n, main int
	inSample, mine, hasMain := false, false, false
	flush := func() {
		if inSample && mine {
			n++
			if hasMain {
				main++
			}
		}
		inSample, mine, hasMain = false, false, false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " "):
			flush()
			inSample, mine = true, strings.TrimSpace(line) == comm
			total++
		default:
			f := strings.Fields(line)
			if len(f) >= 2 && (f[1] == "main" || strings.HasPrefix(f[1], "main+")) {
				hasMain = true
			}
		}
	}
	flush()
	if n == 0 {
		return 0, 0, float64(total), nil
	}
	return n, float64(main) / float64(n), float64(total), nil
}

// ReadMetrics reads a Prometheus text page (heatscope's /metrics) and
// returns each family's value, summed over its series (a counter's or a
// gauge's; a summary's count), and each series of one label as
// name{label=value}.
func ReadMetrics(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	out := make(map[string]float64, len(fams))
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetSummary().GetSampleCount())
			out[name] += v
			if l := m.GetLabel(); len(l) == 1 {
				out[name+"{"+l[0].GetName()+"="+l[0].GetValue()+"}"] += v
			}
		}
	}
	return out, nil
}

// FreePort returns a loopback TCP port free now.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}

// WaitHTTP waits up to timeout for url to answer.
func WaitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s does not answer", url)
}

// PerfScript symbolizes every sample of a perf.data file with perf script
// (stacks included, as heatscope keeps them) and returns the sample count
// and what perf script cost. Its output is counted as it streams, never
// held: a build's perf.data makes gigabytes of it.
func PerfScript(path string) (int, Usage, error) {
	cmd := exec.Command("perf", "script", "-i", path, "-F", "comm,pid,tid,cpu,time,ip,sym,dso")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, Usage{}, fmt.Errorf("perf script: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return 0, Usage{}, fmt.Errorf("perf script: %w", err)
	}
	// Each sample is a header line, its frames and a blank line.
	samples := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			samples++
		}
	}
	scanErr := sc.Err()
	if scanErr != nil {
		io.Copy(io.Discard, out)
	}
	if err := cmd.Wait(); err != nil {
		return 0, Usage{}, fmt.Errorf("perf script: %w%s", err, lastLine(stderr.Bytes()))
	}
	if scanErr != nil {
		return 0, Usage{}, fmt.Errorf("perf script's output: %w", scanErr)
	}
	return samples, UsageOf(cmd.ProcessState), nil
}

// lastLine is the last non-empty line of a command's error output, as
// ": line" to follow its exit status, or "" when it wrote none.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + l
	}
	return ""
}
