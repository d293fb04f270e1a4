package main

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/needs"
)

// TestRecordSaturationBadFlags: out-of-range saturation flags are usage
// errors naming the flag.
func TestRecordSaturationBadFlags(t *testing.T) {
	bin := buildHeatscope(t, t.TempDir())
	for _, tc := range []struct{ args, want string }{
		{"--saturation-cpu 40", "--saturation-cpu"},
		{"--saturation-cpu 100", "--saturation-cpu"},
		{"--saturation-cpu abc", "saturation-cpu"},
		{"--saturation-node 0", "--saturation-node"},
		{"--saturation-node 101", "--saturation-node"},
		{"--saturation-min 10ms", "--saturation-min"},
		{"--saturation-min 1h", "--saturation-min"},
	} {
		_, stderr, err := runHeatscope(bin, append([]string{"record", "--data", t.TempDir()}, strings.Fields(tc.args)...)...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("record %s: %v, stderr %q; want exit status 2 naming %s", tc.args, err, stderr, tc.want)
		}
	}
}

// cpuTimes is /proc/stat's busy and total jiffies per CPU.
type cpuTimes struct{ busy, total []int64 }

func readCPUTimes(t *testing.T) cpuTimes {
	t.Helper()
	f, err := os.Open("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ct cpuTimes
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || !strings.HasPrefix(fields[0], "cpu") || fields[0] == "cpu" {
			continue
		}
		var v [8]int64
		for i := range v {
			v[i], _ = strconv.ParseInt(fields[1+i], 10, 64)
		}
		// user nice system idle iowait irq softirq steal
		busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		ct.busy = append(ct.busy, busy)
		ct.total = append(ct.total, busy+v[3]+v[4])
	}
	return ct
}

// cpuLoad returns each CPU's and the node's busy share (%) between a and b.
func cpuLoad(a, b cpuTimes) (perCPU []float64, node float64) {
	var busy, total int64
	for i := range min(len(a.busy), len(b.busy)) {
		db, dt := b.busy[i]-a.busy[i], b.total[i]-a.total[i]
		busy, total = busy+db, total+dt
		perCPU = append(perCPU, 100*float64(db)/float64(max(dt, 1)))
	}
	return perCPU, 100 * float64(busy) / float64(max(total, 1))
}

// fixtureRun is what satfix printed.
type fixtureRun struct {
	pid     int
	threads []fixtureThread
	start   time.Time
	end     time.Time
	perCPU  []float64 // each CPU's busy % while it ran (/proc/stat)
	node    float64
}

type fixtureThread struct {
	tid, cpu int
	share    float64 // CPU time over wall time, %
}

func runFixture(t *testing.T, satfix string, seconds float64, duty int, cpus ...int) fixtureRun {
	t.Helper()
	args := []string{strconv.FormatFloat(seconds, 'f', -1, 64), strconv.Itoa(duty)}
	for _, c := range cpus {
		args = append(args, strconv.Itoa(c))
	}
	before := readCPUTimes(t)
	run := fixtureRun{start: time.Now()}
	out, err := exec.Command(satfix, args...).Output()
	run.end = time.Now()
	run.perCPU, run.node = cpuLoad(before, readCPUTimes(t))
	if err != nil {
		t.Fatalf("satfix %v: %v", args, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var th fixtureThread
		var busy, wall int64
		if n, _ := fmt.Sscanf(line, "tid=%d cpu=%d busy_ns=%d wall_ns=%d", &th.tid, &th.cpu, &busy, &wall); n == 4 {
			th.share = 100 * float64(busy) / float64(max(wall, 1))
			run.threads = append(run.threads, th)
		} else if _, err := fmt.Sscanf(line, "pid=%d", &run.pid); err != nil {
			t.Fatalf("satfix printed %q", line)
		}
	}
	if run.pid == 0 || len(run.threads) != len(cpus) {
		t.Fatalf("satfix printed %q", out)
	}
	return run
}

// othersThan is the average busy % of the CPUs other than cpu while the
// fixture ran (/proc/stat): what the detector's rule judges.
func (r fixtureRun) othersThan(cpu int) float64 {
	var sum float64
	n := 0
	for i, l := range r.perCPU {
		if i != cpu {
			sum += l
			n++
		}
	}
	return sum / float64(max(n, 1))
}

func (r fixtureRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %.0f%% busy (CPUs", r.node)
	for i, l := range r.perCPU {
		fmt.Fprintf(&b, " %d: %.0f%%", i, l)
	}
	b.WriteString(")")
	for _, th := range r.threads {
		fmt.Fprintf(&b, ", fixture thread %d on CPU %d got %.0f%% of it", th.tid, th.cpu, th.share)
	}
	return b.String()
}

type satEvent struct {
	Time   float64           `json:"time"`
	Source string            `json:"source"`
	Text   string            `json:"text"`
	Labels map[string]string `json:"labels"`
}

// saturationEvents returns the cpu-saturation events from the recorder's
// API of the fixture run's process, and those of other processes.
func saturationEvents(t *testing.T, url string, run fixtureRun) (mine, others []satEvent) {
	t.Helper()
	var answer struct {
		Events []satEvent `json:"events"`
	}
	from, to := float64(run.start.UnixNano())/1e9-1, float64(run.end.UnixNano())/1e9+5
	getJSON(t, fmt.Sprintf("%s/api/events?kind=cpu-saturation&from=%.3f&to=%.3f", url, from, to), &answer)
	for _, e := range answer.Events {
		if e.Labels["kind"] != "cpu-saturation" || e.Source != "heatscope" {
			t.Errorf("kind=cpu-saturation answered %+v", e)
		}
		if e.Labels["pid"] == strconv.Itoa(run.pid) {
			mine = append(mine, e)
		} else {
			others = append(others, e)
		}
	}
	return mine, others
}

// TestSaturationEvents records, with the default flags, the fixture pinned
// to one CPU for 2 s (exactly one event naming it, its thread, CPU and hot
// function, lasting about 2 s: on two CPUs too, where it alone is a node
// 50% busy), and twice not saturating: 50% busy, and with every CPU busy
// (no event). The machine is shared: each CPU's load while the fixture ran
// is measured (/proc/stat), and the 2 s run is repeated until the other
// CPUs were quiet enough to make their condition clear; a run where they
// were clearly too busy must give no event.
func TestSaturationEvents(t *testing.T) {
	bpftest.Require(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs: one saturated, one to stay quiet")
	}
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	satfix := filepath.Join(dir, "satfix")
	if out, err := exec.Command("gcc", "-O0", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", satfix, "testdata/satfix.c").CombinedOutput(); err != nil {
		t.Fatalf("build satfix: %v\n%s", err, out)
	}
	// The defaults: --saturation-cpu 90, --saturation-node 50 (of the
	// other CPUs), --saturation-min 1s.
	const cpuThreshold, othersThreshold = 90.0, 50.0
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", filepath.Join(dir, "data"), "--listen", addr, "--progress", "0", "--kmsg", "")
	url := "http://" + addr
	waitServing(t, d, url+"/api/sources")
	time.Sleep(2 * time.Second) // a first full window
	// A span is reported once a window without it has closed: 1 s, a
	// slot of lateness and a poll after the fixture ends.
	const settle = 2500 * time.Millisecond
	hot := runtime.NumCPU() - 1

	// Not saturating: busy 50% of the time.
	half := runFixture(t, satfix, 2, 50, hot)
	time.Sleep(settle)
	if mine, _ := saturationEvents(t, url, half); len(mine) != 0 {
		t.Errorf("a thread 50%% busy (%v): %d events: %+v", half, len(mine), mine)
	}
	// Not saturating: every CPU busy.
	all := make([]int, runtime.NumCPU())
	for i := range all {
		all[i] = i
	}
	busy := runFixture(t, satfix, 2, 100, all...)
	time.Sleep(settle)
	if mine, _ := saturationEvents(t, url, busy); len(mine) != 0 {
		t.Errorf("every CPU busy (%v): %d events: %+v", busy, len(mine), mine)
	}

	// Saturating, until a run shows the other CPUs quiet enough.
	const attempts = 10
	var seen []string
	for attempt := 1; attempt <= attempts; attempt++ {
		run := runFixture(t, satfix, 2, 100, hot)
		time.Sleep(settle)
		mine, others := saturationEvents(t, url, run)
		seen = append(seen, run.String())
		th := run.threads[0]
		rest := run.othersThan(th.cpu)
		t.Logf("attempt %d: %v; %d events of the fixture, %d of other processes %+v", attempt, run, len(mine), len(others), others)
		switch {
		case rest >= othersThreshold+10:
			// The other CPUs were clearly too busy: no event may name the fixture.
			if len(mine) != 0 {
				t.Errorf("the other CPUs were %.0f%% busy, over the %.0f%% threshold, yet: %+v", rest, othersThreshold, mine)
			}
			continue
		case th.share < 95 || rest > othersThreshold-10:
			continue // too close to a threshold to say
		}
		if len(mine) != 1 {
			t.Fatalf("the fixture saturated CPU %d for 2 s, the other CPUs %.0f%% busy (%v): %d events, want 1: %+v", th.cpu, rest, run, len(mine), mine)
		}
		e := mine[0]
		for k, want := range map[string]string{"comm": "satfix", "tid": strconv.Itoa(th.tid), "cpu": strconv.Itoa(th.cpu),
			"user_function": "saturate_hot"} {
			if e.Labels[k] != want {
				t.Errorf("label %s = %q, want %q: %+v", k, e.Labels[k], want, e)
			}
		}
		dur, _ := strconv.ParseFloat(e.Labels["duration_seconds"], 64)
		if math.Abs(dur-2) > 0.25 {
			t.Errorf("the event lasts %.3fs, want 2s ± 0.25: %+v", dur, e)
		}
		if start := float64(run.start.UnixNano()) / 1e9; math.Abs(e.Time-start) > 0.3 {
			t.Errorf("the event starts %.3fs after the fixture, want ± 0.3s: %+v", e.Time-start, e)
		}
		cpuBusy, _ := strconv.ParseFloat(e.Labels["cpu_busy_percent"], 64)
		node, _ := strconv.ParseFloat(e.Labels["node_busy_percent"], 64)
		other, _ := strconv.ParseFloat(e.Labels["other_cpus_busy_percent"], 64)
		if cpuBusy <= cpuThreshold || other >= othersThreshold || math.Abs(other-rest) > 15 || math.Abs(node-run.node) > 15 {
			t.Errorf("the event says CPU %.1f%%, other CPUs %.1f%% and node %.1f%% busy; /proc/stat saw %v", cpuBusy, other, node, run)
		}
		if !strings.Contains(e.Text, "satfix") || !strings.Contains(e.Text, "saturate_hot") {
			t.Errorf("text %q", e.Text)
		}
		d.stop(t)
		return
	}
	msg := fmt.Sprintf("the machine never left CPU %d to the fixture with the other CPUs under %.0f%% busy in %d runs: %s",
		hot, othersThreshold-10, attempts, strings.Join(seen, "; "))
	needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", msg)
}
