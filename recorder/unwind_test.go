package recorder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/fixture"
	"github.com/heatscope/heatscope/internal/needs"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/symbolize"
	"github.com/heatscope/heatscope/unwind"
)

// chainSource is a C program whose hot leaf is three calls below main,
// built without frame pointers: frame pointers give "leaf_work" and
// garbage callers; the unwind tables give the whole chain. middle_layer
// also calls into libc (snprintf, atoi), itself built without them.
const chainSource = `#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long leaf_work(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i * i; return s; }
__attribute__((noinline)) long middle_layer(long n) { char buf[300]; snprintf(buf, sizeof buf, "%ld", n); return leaf_work(n + atoi(buf)) + 1; }
__attribute__((noinline)) long outer_layer(long n) { return middle_layer(n) * 2; }
int main(int argc, char **argv) { long t = 0; for (;;) t += outer_layer(argc * 1000000); return (int)t; }
`

// qsortSource sorts forever with a comparator that burns CPU: its samples
// go comparator -> libc's sort (no frame pointers) -> qsort -> main.
const qsortSource = `#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) int slow_compare(const void *a, const void *b) {
	for (int i = 0; i < 200; i++) sink += i;
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}
int main(void) {
	static int v[4096];
	for (;;) { for (int i = 0; i < 4096; i++) v[i] = (i * 7919) % 4096; qsort(v, 4096, sizeof v[0], slow_compare); }
}
`

// cxxSource throws and catches in a loop below a hot function, with
// exceptions on: its frames' CFI carries LSDA pointers ('L', 'P').
const cxxSource = `#include <stdexcept>
static volatile long sink;
__attribute__((noinline)) long spin_inner(long n) { for (long i = 0; i < n; i++) sink += i; if (n < 0) throw std::runtime_error("neg"); return sink; }
__attribute__((noinline)) long guarded(long n) { try { return spin_inner(n); } catch (const std::exception &) { return -1; } }
int main() { for (;;) { guarded(3000000); try { spin_inner(-1); } catch (...) {} } }
`

func start(t *testing.T, bin string) int {
	t.Helper()
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// userStacks records pid's user stacks for d and returns each sample's
// user function names root first, with its time, and the sampler's stats.
type userStack struct {
	at    time.Time
	funcs []string
}

func recordUser(t *testing.T, pid int, unwind profiler.Unwind, d time.Duration) ([]userStack, profiler.Stats) {
	t.Helper()
	return recordUserCached(t, pid, unwind, d, t.TempDir())
}

// recordUserCached is recordUser with the unwind tables cached in dir;
// each of opened runs on a goroutine of its own once the recorder is open
// (which takes seconds on a busy machine).
func recordUserCached(t *testing.T, pid int, unwind profiler.Unwind, d time.Duration, dir string, opened ...func()) ([]userStack, profiler.Stats) {
	t.Helper()
	cfg := profiler.Config{Frequency: 99, PIDs: []uint32{uint32(pid)}, Stacks: profiler.StacksUser, Unwind: unwind,
		UnwindCacheDir: dir}
	openedAt := time.Now()
	rec, err := Open(cfg, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	t.Logf("recorder (--unwind %v) opened in %v", unwind, time.Since(openedAt).Round(time.Millisecond))
	defer rec.Close()
	for _, f := range opened {
		go f()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []userStack
	err = rec.Run(ctx, func(s *sample.Sample) {
		var funcs []string
		for i := len(s.Stack) - 1; i >= 0; i-- {
			if s.Stack[i].Kind != sample.KindKernel {
				funcs = append(funcs, s.Stack[i].Function)
			}
		}
		out = append(out, userStack{time.Unix(0, s.Time), funcs})
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rec.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

// inOrder reports whether want appear in stack (root first) in this
// order, each right below the one before it (no frame between them).
func inOrder(stack []string, want ...string) bool {
	i := slices.Index(stack, want[0])
	if i < 0 || len(stack) < i+len(want) {
		return false
	}
	return slices.Equal(stack[i:i+len(want)], want)
}

// share returns the share of stacks (after skip) holding leaf whose stack
// holds chain in order, the number with leaf, and an example of a stack
// that does not.
func share(stacks []userStack, after time.Time, leaf string, chain ...string) (float64, int, string) {
	return shareOf(stacks, after, leaf, func(f []string) bool { return inOrder(f, chain...) })
}

// shareOf is share with whole saying which stacks are whole.
func shareOf(stacks []userStack, after time.Time, leaf string, whole func([]string) bool) (float64, int, string) {
	n, ok := 0, 0
	bad := ""
	for _, s := range stacks {
		if s.at.Before(after) || len(s.funcs) == 0 || s.funcs[len(s.funcs)-1] != leaf {
			continue
		}
		n++
		if whole(s.funcs) {
			ok++
		} else if bad == "" {
			bad = strings.Join(s.funcs, ";")
		}
	}
	if n == 0 {
		return 0, 0, ""
	}
	return float64(ok) / float64(n), n, bad
}

// tablesIn returns when the first sample whose stack holds chain was
// taken: the process's tables were in by then (the first samples of a
// process are walked with frame pointers). The time it took is logged,
// not asserted: this machine is shared, and a busy one builds tables
// slower than the second they take on an idle one.
func tablesIn(t *testing.T, stacks []userStack, whole func([]string) bool) time.Time {
	t.Helper()
	if len(stacks) == 0 {
		t.Fatal("no sample recorded")
	}
	for _, s := range stacks {
		if whole(s.funcs) {
			t.Logf("first whole stack %v after the first sample", s.at.Sub(stacks[0].at).Round(time.Millisecond))
			return s.at
		}
	}
	t.Fatalf("no stack of %d is whole; e.g. %s", len(stacks), example(stacks))
	return time.Time{}
}

// recordFixture starts bin and records its user stacks with the table
// walk for 6 s.
func recordFixture(t *testing.T, bin string) ([]userStack, profiler.Stats) {
	t.Helper()
	pid := start(t, bin)
	time.Sleep(50 * time.Millisecond)
	return recordUser(t, pid, profiler.UnwindDWARF, 8*time.Second)
}

// checkChain records a running fixture with the table walk and checks
// that, once the tables are in, at least minShare of the samples in leaf
// have the whole chain.
func checkChain(t *testing.T, bin string, minShare float64, leaf string, chain ...string) profiler.Stats {
	t.Helper()
	stacks, st := recordFixture(t, bin)
	got, n, bad := share(stacks, tablesIn(t, stacks, func(f []string) bool { return inOrder(f, chain...) }), leaf, chain...)
	// The shared machine can starve a fixture to a few percent of a CPU:
	// ten samples are the least a share is judged on.
	if n < 10 {
		t.Fatalf("%d samples in %s once the tables were in (of %d): the fixture did not run; e.g. %s", n, leaf, len(stacks), example(stacks))
	}
	if got < minShare {
		t.Errorf("%.1f%% of %d samples in %s have %s, want at least %.0f%%; e.g. %s", 100*got, n, leaf,
			strings.Join(chain, ";"), 100*minShare, bad)
	}
	if st.DWARFWalks == 0 || st.Unwind.Tables == 0 {
		t.Errorf("no stack walked with tables (%d walks, %d tables loaded)", st.DWARFWalks, st.Unwind.Tables)
	}
	// Every frame above the leaf of a whole chain was found with a table:
	// the per-frame count says so, and frame pointers found few.
	if st.Unwind.TableFrames < uint64(len(chain)-1)*uint64(float64(n)*minShare) || st.Unwind.FPFrames > st.Unwind.TableFrames {
		t.Errorf("user frames found with tables %d, with frame pointers %d, for %d samples of a %d-deep chain",
			st.Unwind.TableFrames, st.Unwind.FPFrames, n, len(chain))
	}
	t.Logf("%.1f%% of %d samples in %s whole; walks: %d with tables, %d frame pointers first; tables %d (%d bytes), built %d",
		100*got, n, leaf, st.DWARFWalks, st.FPWalks, st.Unwind.Tables, st.Unwind.TableBytes, st.Unwind.Built)
	return st
}

func TestUnwindChainWithoutFramePointers(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "gcc", "fixture", chainSource, "-O2", "-fomit-frame-pointer")
	checkChain(t, bin, 0.95, "leaf_work", "main", "outer_layer", "middle_layer", "leaf_work")

	// The same fixture with frame pointers walked: the chain is lost,
	// which is what this test would not see if the walk did nothing.
	pid := start(t, bin)
	stacks, _ := recordUser(t, pid, profiler.UnwindFP, 2*time.Second)
	if got, n, _ := share(stacks, time.Time{}, "leaf_work", "main", "outer_layer", "middle_layer", "leaf_work"); n > 0 && got > 0.5 {
		t.Errorf("frame pointers found the chain in %.0f%% of %d samples: the fixture has frame pointers after all", 100*got, n)
	}
}

func TestUnwindThroughLibc(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "gcc", "fixture", qsortSource, "-O2", "-fomit-frame-pointer")
	stacks, _ := recordFixture(t, bin)
	// libc's own frames between qsort and the comparator vary
	// (msort_with_tmp recursion): main, then qsort's frames, then the
	// comparator, in that order, is what must hold.
	whole := func(f []string) bool {
		i := slices.Index(f, "main")
		j := slices.IndexFunc(f, func(s string) bool { return strings.Contains(s, "qsort") })
		return i >= 0 && j == i+1 && len(f)-1 > j && f[len(f)-1] == "slow_compare"
	}
	got, n, bad := shareOf(stacks, tablesIn(t, stacks, whole), "slow_compare", whole)
	if n < 10 {
		t.Fatalf("%d samples in slow_compare: the fixture did not run", n)
	}
	if got < 0.95 {
		t.Errorf("%.1f%% of %d comparator samples reach main through qsort; e.g. %s", 100*got, n, bad)
	}
	t.Logf("%.1f%% of %d comparator samples reach main through qsort", 100*got, n)
}

func TestUnwindCPlusPlusExceptions(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "g++", "fixture", cxxSource, "-O2", "-fomit-frame-pointer", "-fexceptions")
	checkChain(t, bin, 0.95, "spin_inner", "main", "guarded", "spin_inner")
}

func TestUnwindStrippedBinary(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "gcc", "fixture", chainSource, "-O2", "-fomit-frame-pointer", "-g")
	stripped := bin + "-stripped"
	if out, err := exec.Command("objcopy", "--strip-all", "--keep-section=.eh_frame", bin, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	// Symbols are gone, so the fixture's frames are addresses; what must
	// hold is the depth: below libc's __libc_start_call_main, the four
	// frames of main, outer_layer, middle_layer and leaf_work (or more,
	// in libc's snprintf).
	stacks, _ := recordFixture(t, stripped)
	whole := func(f []string) bool {
		i := slices.Index(f, "__libc_start_call_main")
		return i >= 0 && len(f)-i-1 >= 4
	}
	in := tablesIn(t, stacks, whole)
	n, deep := 0, 0
	for _, s := range stacks {
		if s.at.Before(in) || len(s.funcs) == 0 {
			continue
		}
		n++
		if whole(s.funcs) {
			deep++
		}
	}
	if n < 10 {
		t.Fatalf("%d samples: the fixture did not run", n)
	}
	if float64(deep) < 0.95*float64(n) {
		t.Errorf("%d of %d samples of the stripped binary have four frames below __libc_start_call_main; e.g. %s", deep, n, example(stacks))
	}
}

// example returns the last stack, for messages.
func example(stacks []userStack) string {
	if len(stacks) == 0 {
		return "(no sample)"
	}
	return strings.Join(stacks[len(stacks)-1].funcs, ";")
}

// goSource is a Go program with a hot chain under main.main. Go keeps
// frame pointers and writes .debug_frame (no .eh_frame): the walks must
// agree, except that frame pointers skip the caller of a leaf that sets
// up no frame (main.leaf here), which the tables do not.
const goSource = `package main

var sink int

//go:noinline
func leaf(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

//go:noinline
func middle(n int) int { return leaf(n) + 1 }

//go:noinline
func outer(n int) int { return middle(n) * 2 }

func main() {
	for {
		sink += outer(5000000)
	}
}
`

// buildGo builds goSource.
func buildGo(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to build the Go fixture: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goSource), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gofixture")
	cmd := exec.Command(goTool, "build", "-o", bin, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestUnwindGoAgreesWithFramePointers(t *testing.T) {
	bpftest.Require(t)
	bin := buildGo(t)
	chain := []string{"main.main", "main.outer", "main.middle", "main.leaf"}
	st := checkChain(t, bin, 0.95, "main.leaf", chain...)
	if st.Unwind.Built+st.Unwind.CacheHits == 0 {
		t.Error("no table was built for the Go binary (.debug_frame)")
	}
	pid := start(t, bin)
	stacks, _ := recordUser(t, pid, profiler.UnwindFP, 3*time.Second)
	n, agree := 0, 0
	bad := ""
	for _, s := range stacks {
		if len(s.funcs) == 0 || s.funcs[len(s.funcs)-1] != "main.leaf" {
			continue
		}
		n++
		// The frame-pointer stack is the chain, or the chain without
		// main.middle (the leaf's caller).
		if inOrder(s.funcs, chain...) || inOrder(s.funcs, "main.main", "main.outer", "main.leaf") {
			agree++
		} else if bad == "" {
			bad = strings.Join(s.funcs, ";")
		}
	}
	if n < 10 || float64(agree) < 0.95*float64(n) {
		t.Errorf("frame pointers: %d of %d samples in main.leaf agree with the tables' chain; e.g. %s", agree, n, bad)
	}
}

// execSource spins until the file named by its first argument exists,
// then execs the program named by its second: the same pid with another
// address space.
const execSource = `#include <unistd.h>
static volatile long sink;
int main(int argc, char **argv) {
	if (argc < 3) return 1;
	while (access(argv[1], F_OK) != 0) for (int i = 0; i < 100000; i++) sink += i;
	execv(argv[2], argv + 2);
	return 1;
}
`

// startExec starts execBin, which execs target once the returned function,
// run once the recorder is open (it takes seconds on a busy machine), has
// waited 3 s: the first image's tables are in by then.
func startExec(t *testing.T, execBin, target string) (*exec.Cmd, func()) {
	t.Helper()
	trigger := filepath.Join(t.TempDir(), "exec-now")
	cmd := exec.Command(execBin, trigger, target)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, func() {
		time.Sleep(3 * time.Second)
		if err := os.WriteFile(trigger, nil, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func TestUnwindAfterExec(t *testing.T) {
	bpftest.Require(t)
	chainBin := fixture.BuildC(t, "", "gcc", "fixture", chainSource, "-O2", "-fomit-frame-pointer")
	execBin := fixture.BuildC(t, "", "gcc", "fixture", execSource, "-O2")
	cmd, execNow := startExec(t, execBin, chainBin)
	// The first process image's tables go in first; after the exec the
	// walk sees another mm and asks for the new image's mappings.
	chain := []string{"main", "outer_layer", "middle_layer", "leaf_work"}
	stacks, st := recordUserCached(t, cmd.Process.Pid, profiler.UnwindDWARF, 6*time.Second, t.TempDir(), execNow)
	in := tablesIn(t, stacks, func(f []string) bool { return inOrder(f, chain...) })
	got, n, bad := share(stacks, in, "leaf_work", chain...)
	if n < 10 || got < 0.95 {
		t.Errorf("after the exec: %.0f%% of %d samples in leaf_work have the chain; e.g. %s", 100*got, n, bad)
	}
	if st.Unwind.MapsReads < 2 {
		t.Errorf("the process's mappings were read %d times: the exec did not refresh them", st.Unwind.MapsReads)
	}
}

// nodeScript keeps three named JS functions hot for a minute.
const nodeScript = `function leafJs(n) { let s = 0; for (let i = 0; i < n; i++) { s += i % 7; } return s; }
function middleJs(n) { return leafJs(n) + 1; }
function outerJs(n) { return middleJs(n) * 2; }
let total = 0;
const end = Date.now() + 60000;
while (Date.now() < end) { total += outerJs(1000000); }
console.log(total);
`

// TestUnwindNodePerfMap runs Debian's node with --perf-basic-prof: its
// native frames are walked with tables, V8's JIT frames with frame
// pointers, and the JIT frames are named from /tmp/perf-PID.map.
func TestUnwindNodePerfMap(t *testing.T) {
	bpftest.Require(t)
	node, err := exec.LookPath("node")
	if err != nil {
		needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", fmt.Sprintf("node is not installed (apt-get install nodejs): %v", err))
	}
	script := filepath.Join(t.TempDir(), "hot.js")
	if err := os.WriteFile(script, []byte(nodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	// Inlining would fold the three functions into one JIT frame.
	cmd := exec.Command(node, "--perf-basic-prof", "--interpreted-frames-native-stack", "--no-turbo-inlining", script)
	cmd.Dir = filepath.Dir(script) // V8 writes its isolate-*.log there
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid))
	})
	time.Sleep(300 * time.Millisecond)
	jsFrame := func(f []string, name string) int {
		return slices.IndexFunc(f, func(s string) bool { return strings.HasPrefix(s, "JS:") && strings.Contains(s, name+" ") })
	}
	whole := func(f []string) bool {
		native := slices.Index(f, "node::Start")
		o, m, l := jsFrame(f, "outerJs"), jsFrame(f, "middleJs"), jsFrame(f, "leafJs")
		return native >= 0 && o > native && m == o+1 && l == m+1 && l == len(f)-1
	}
	// node's own table is large (2.8 MB of .eh_frame, 370,000 rows):
	// built for the first time it takes seconds on a busy machine
	// (frame pointers for node's own frames until then), read from the
	// cache after that, as here: the tables of every binary node maps
	// are built into the cache first, so that most samples are walked
	// with them.
	cacheDir := t.TempDir()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) == 6 && strings.Contains(f[1], "x") && strings.HasPrefix(f[5], "/") {
			if _, _, err := (unwind.Cache{Dir: cacheDir}).Load(f[5]); err != nil && !errors.Is(err, unwind.ErrNoCFI) {
				t.Fatalf("build the unwind table of %s: %v", f[5], err)
			}
		}
	}
	stacks, st := recordUserCached(t, cmd.Process.Pid, profiler.UnwindDWARF, 6*time.Second, cacheDir)
	in := tablesIn(t, stacks, func(f []string) bool { return whole(f) })
	if st.DWARFWalks == 0 {
		t.Fatalf("no stack of node was walked with its tables (%d with frame pointers; %d tables loaded)", st.FPWalks, st.Unwind.Tables)
	}
	n, ok := 0, 0
	bad := ""
	for _, s := range stacks {
		if s.at.Before(in) || len(s.funcs) == 0 || jsFrame(s.funcs, "leafJs") != len(s.funcs)-1 {
			continue
		}
		n++
		if whole(s.funcs) {
			ok++
		} else if bad == "" {
			bad = strings.Join(s.funcs, ";")
		}
	}
	if n < 10 || float64(ok) < 0.9*float64(n) {
		t.Errorf("%d of %d samples in leafJs have node::Start, then outerJs, middleJs, leafJs; e.g. %s", ok, n, bad)
	}
	if st.DWARFWalks < st.FPWalks || st.Unwind.CacheHits == 0 {
		t.Errorf("%d stacks walked with tables, %d with frame pointers, %d tables from the cache: node's cached tables were not used",
			st.DWARFWalks, st.FPWalks, st.Unwind.CacheHits)
	}
	t.Logf("%d of %d samples in leafJs whole; %d walks with tables, %d with frame pointers first; %d tables loaded", ok, n, st.DWARFWalks, st.FPWalks, st.Unwind.Tables)
}

// recordBounded records pid's user stacks for d with the unwind tables
// bounded to bound bytes, and returns them, the stats, and the most table
// bytes loaded at any poll; opened run as recordUserCached's do.
func recordBounded(t *testing.T, pid int, bound int64, d time.Duration, opened ...func()) ([]userStack, profiler.Stats, int64) {
	t.Helper()
	cfg := profiler.Config{Frequency: 99, PIDs: []uint32{uint32(pid)}, Stacks: profiler.StacksUser,
		Unwind: profiler.UnwindDWARF, UnwindCacheDir: t.TempDir(), UnwindMaxBytes: bound}
	rec, err := Open(cfg, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	for _, f := range opened {
		go f()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	maxBytes := int64(0)
	rec.OnPoll(func() {
		if st, err := rec.Counters(); err == nil {
			maxBytes = max(maxBytes, st.Unwind.TableBytes)
		}
	})
	var out []userStack
	err = rec.Run(ctx, func(s *sample.Sample) {
		var funcs []string
		for i := len(s.Stack) - 1; i >= 0; i-- {
			funcs = append(funcs, s.Stack[i].Function)
		}
		out = append(out, userStack{time.Unix(0, s.Time), funcs})
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rec.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if maxBytes > bound || st.Unwind.TableBytes > bound {
		t.Errorf("tables of up to %d bytes loaded (now %d), over the %d-byte bound", maxBytes, st.Unwind.TableBytes, bound)
	}
	t.Logf("%+v; at most %d bytes loaded", st.Unwind, maxBytes)
	return out, st, maxBytes
}

// tableBytes is the size of the binary's table as loaded (unwind.Table.Size).
func tableBytes(t *testing.T, path string) int64 {
	t.Helper()
	tab, _, err := unwind.Cache{}.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(tab.Size())
}

// mappedPath returns the path of the file process pid maps whose path has
// part, from its /proc/PID/maps.
func mappedPath(t *testing.T, pid int, part string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(f[5], part) {
			return f[5]
		}
	}
	t.Fatalf("process %d maps no file with %q in its path:\n%s", pid, part, data)
	return ""
}

// TestUnwindTablesBoundedWithoutThrash runs the chain fixture, whose
// tables in use (its own and libc's: its stacks pass through both, not
// through ld.so, whose table is not built) do not both fit in a bound one
// byte short of them. The tables in use stay in and the one left out
// waits (Deferred) rather than trading places with them at every poll, as
// an LRU that evicts a table in use would (each trade a build or a cache
// read). The chain, in the fixture's own table, is whole meanwhile.
func TestUnwindTablesBoundedWithoutThrash(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "gcc", "fixture", chainSource, "-O2", "-fomit-frame-pointer")
	pid := start(t, bin)
	time.Sleep(50 * time.Millisecond)
	bound := tableBytes(t, bin) + tableBytes(t, mappedPath(t, pid, "/libc.so")) - 1
	stacks, st, _ := recordBounded(t, pid, bound, 5*time.Second)
	if st.Unwind.Deferred == 0 || st.Unwind.Evictions != 0 {
		t.Errorf("%d tables deferred and %d evicted under a bound smaller than the tables in use, want some deferred and none evicted: %+v",
			st.Unwind.Deferred, st.Unwind.Evictions, st.Unwind)
	}
	if loads := st.Unwind.Built + st.Unwind.CacheHits; loads > 3 {
		t.Errorf("%d table loads (built or read from the cache) for a process with 3 binaries: the tables thrash", loads)
	}
	chain := []string{"main", "outer_layer", "middle_layer", "leaf_work"}
	got, n, bad := share(stacks, tablesIn(t, stacks, func(f []string) bool { return inOrder(f, chain...) }), "leaf_work", chain...)
	if n < 10 || got < 0.95 {
		t.Errorf("%.0f%% of %d samples in leaf_work have the chain under the bound; e.g. %s", 100*got, n, bad)
	}
}

// TestUnwindTablesEvictedAfterExec runs a process that execs from a C
// program (its own, libc's and ld.so's tables: about 405 KB with their
// indexes) into the Go fixture (147 KB) under a 450 KB bound: the old image's tables, used by
// no live process any more, are evicted (least recently used first) to
// make room for the new image's, whose stacks are then whole.
func TestUnwindTablesEvictedAfterExec(t *testing.T) {
	bpftest.Require(t)
	goBin := buildGo(t)
	execBin := fixture.BuildC(t, "", "gcc", "fixture", execSource, "-O2", "-fomit-frame-pointer")
	cmd, execNow := startExec(t, execBin, goBin)
	stacks, st, _ := recordBounded(t, cmd.Process.Pid, 450_000, 7*time.Second, execNow)
	if st.Unwind.Evictions == 0 {
		t.Errorf("no table evicted after the exec under a bound the two images' tables do not fit in: %+v", st.Unwind)
	}
	chain := []string{"main.main", "main.outer", "main.middle", "main.leaf"}
	got, n, bad := share(stacks, tablesIn(t, stacks, func(f []string) bool { return inOrder(f, chain...) }), "main.leaf", chain...)
	if n < 10 || got < 0.95 {
		t.Errorf("after the exec: %.0f%% of %d samples in main.leaf have the chain; e.g. %s", 100*got, n, bad)
	}
}

// signalSource spends about a third of its time in a SIGPROF handler
// installed with SA_SIGINFO (glibc returns from it through __restore_rt),
// built without frame pointers: a sample in the handler unwinds through
// the kernel's signal frame (the ucontext on the stack) to the
// interrupted function and main.
const signalSource = `#include <signal.h>
#include <string.h>
#include <sys/time.h>
static volatile long sink;
__attribute__((noinline)) long handler_work(long n) { for (long i = 0; i < n; i++) sink += i ^ n; return sink; }
__attribute__((noinline)) void on_signal(int sig, siginfo_t *si, void *uc) { sink += handler_work(1000000) + sig + (si != 0) + (uc != 0); }
__attribute__((noinline)) long interrupted(long n) { for (long i = 0; i < n; i++) sink += i; return sink; }
int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPROF, &sa, 0) != 0) return 2;
	struct itimerval it = {{0, 5000}, {0, 5000}};
	if (setitimer(ITIMER_PROF, &it, 0) != 0) return 3;
	long t = 0;
	for (;;) t += interrupted(100000);
	return (int)t;
}
`

// TestUnwindThroughSignalFrame samples a process inside its signal
// handler: the handler's stack must reach main through the signal frame.
func TestUnwindThroughSignalFrame(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "gcc", "fixture", signalSource, "-O2", "-fomit-frame-pointer")
	stacks, st := recordFixture(t, bin)
	// handler_work, called by on_signal, called from the signal frame
	// on top of what it interrupted, under main.
	whole := func(f []string) bool {
		i, j := slices.Index(f, "main"), slices.Index(f, "on_signal")
		return i >= 0 && j > i && len(f) == j+2 && f[j+1] == "handler_work"
	}
	in := tablesIn(t, stacks, whole)
	got, n, bad := shareOf(stacks, in, "handler_work", whole)
	if n < 10 {
		t.Fatalf("%d samples in the signal handler once the tables were in (of %d): the handler did not run; e.g. %s", n, len(stacks), example(stacks))
	}
	if got < 0.95 {
		t.Errorf("%.1f%% of %d samples in the signal handler reach main through the signal frame; e.g. %s", 100*got, n, bad)
	}
	// The handler interrupts the hot loop most of the time: below the
	// handler is the signal return trampoline (glibc's __restore_rt),
	// and below it the interrupted function.
	through, _, _ := shareOf(stacks, in, "handler_work", func(f []string) bool {
		j := slices.Index(f, "on_signal")
		return whole(f) && j >= 2 && f[j-2] == "interrupted"
	})
	if through < got/2 {
		t.Errorf("%.1f%% of the handler's samples have the interrupted function below the signal frame; e.g. %s", 100*through, example(stacks))
	}
	if st.UnsupportedRows > 0 {
		t.Logf("%d walks stopped at an unsupported row", st.UnsupportedRows)
	}
	t.Logf("%.1f%% of %d samples in the signal handler reach main, %.1f%% through the interrupted function", 100*got, n, 100*through)
}

// pluginSource is a shared library built without frame pointers, whose
// hot leaf is two calls below its entry point.
const pluginSource = `static volatile long sink;
__attribute__((noinline)) long plugin_leaf(long n) { for (long i = 0; i < n; i++) sink += i * i; return sink; }
__attribute__((noinline)) long plugin_middle(long n) { return plugin_leaf(n) + 1; }
long plugin_entry(long n) { return plugin_middle(n) * 2; }
`

// dlopenSource spins until the file named by its second argument exists
// (the test creates it once its tables are in), then dlopens the library
// named by its first argument and calls into it forever: the library is a
// mapping the process's unwind entry does not have.
const dlopenSource = `#include <dlfcn.h>
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) long call_plugin(long (*entry)(long), long n) { return entry(n) + 1; }
int main(int argc, char **argv) {
	if (argc < 3) return 1;
	while (access(argv[2], F_OK) != 0) for (int i = 0; i < 100000; i++) sink += i;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) return 2;
	long (*entry)(long) = (long (*)(long))dlsym(h, "plugin_entry");
	if (!entry) return 3;
	long total = 0;
	for (;;) total += call_plugin(entry, 1000000);
	return (int)total;
}
`

// TestUnwindAfterDlopen records a process from before it dlopens a
// library built without frame pointers: the library's pcs are in no
// mapping the walk knows, the agent reads the mappings again and builds
// the library's table, and the hot function's callers reach main.
func TestUnwindAfterDlopen(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	lib := fixture.BuildC(t, dir, "gcc", "libplugin.so", pluginSource, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC")
	bin := fixture.BuildC(t, dir, "gcc", "fixture", dlopenSource, "-O2", "-fomit-frame-pointer", "-ldl")
	trigger := filepath.Join(dir, "dlopen-now")
	cmd := exec.Command(bin, lib, trigger)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	chain := []string{"main", "call_plugin", "plugin_entry", "plugin_middle", "plugin_leaf"}
	// The dlopen comes 2 s into the recording: the process's tables
	// are in by then, and its entry lacks the library.
	stacks, st := recordUserCached(t, cmd.Process.Pid, profiler.UnwindDWARF, 7*time.Second, t.TempDir(), func() {
		time.Sleep(2 * time.Second)
		if err := os.WriteFile(trigger, nil, 0o644); err != nil {
			t.Error(err)
		}
	})
	var first time.Time // the first sample in the library
	for _, s := range stacks {
		if len(s.funcs) > 0 && s.funcs[len(s.funcs)-1] == "plugin_leaf" {
			first = s.at
			break
		}
	}
	if first.IsZero() {
		t.Fatalf("no sample in the library of %d; e.g. %s", len(stacks), example(stacks))
	}
	in := tablesIn(t, stacks, func(f []string) bool { return inOrder(f, chain...) })
	t.Logf("first whole stack in the library %v after its first sample", in.Sub(first).Round(time.Millisecond))
	got, n, bad := share(stacks, in, "plugin_leaf", chain...)
	if n < 10 || got < 0.95 {
		t.Errorf("after the dlopen: %.0f%% of %d samples in plugin_leaf have the chain; e.g. %s", 100*got, n, bad)
	}
	if st.Unwind.MapsReads < 2 {
		t.Errorf("the process's mappings were read %d times: the dlopen did not refresh them", st.Unwind.MapsReads)
	}
}

// mixedSource keeps frame pointers and has no CFI of its own, and sorts
// with libc's qsort, which has CFI and no frame pointers: a sample in the
// comparator has libc's frames found with its table, and the comparator's
// caller and main found with frame pointers.
const mixedSource = `#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) int fp_compare(const void *a, const void *b) {
	for (int i = 0; i < 200; i++) sink += i;
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}
__attribute__((noinline)) void fp_sort(int *v, int n) { qsort(v, n, sizeof v[0], fp_compare); sink++; }
int main(void) {
	static int v[4096];
	for (;;) { for (int i = 0; i < 4096; i++) v[i] = (i * 7919) % 4096; fp_sort(v, 4096); }
}
`

// TestUnwindMethodInPprof records the mixed fixture with the table walk
// into a pprof profile and reads it with the real go tool pprof: the
// labels say which user frames were found with frame pointers.
func TestUnwindMethodInPprof(t *testing.T) {
	bpftest.Require(t)
	goTool := fixture.Tool(t, "go")
	b := profileio.NewPprofBuilder(mixedPeriodNs)
	mixed := 0
	recordMixed(t, 5*time.Second, func(s *sample.Sample) {
		b.Add(s)
		// For the messages: the comparator's samples that reach main.
		if len(s.Stack) > 2 && s.Stack[0].Function == "fp_compare" &&
			slices.ContainsFunc(s.Stack, func(f sample.Frame) bool { return f.Function == "main" }) {
			mixed++
		}
	})
	path := filepath.Join(t.TempDir(), "mixed.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := profileio.WritePprof(f, b.Profile()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	pprof := func(args ...string) string {
		out, err := exec.Command(goTool, append([]string{"tool", "pprof"}, append(args, path)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tags := pprof("-tags")
	t.Logf("go tool pprof -tags:\n%s", tags)
	if !strings.Contains(tags, "unwind:") || !strings.Contains(tags, "table+fp") {
		t.Errorf("go tool pprof -tags shows no sample with frames found both ways (unwind: table+fp); %d comparator stacks reach main", mixed)
	}
	// main is found with frame pointers (fp_sort has no CFI), the
	// comparator's caller in libc too (the comparator has no CFI).
	i := strings.Index(tags, "unwind_fp:")
	if i < 0 || !strings.Contains(tags[i:], " main\n") {
		t.Errorf("go tool pprof -tags does not name main among the frames found with frame pointers")
	}
	// And a pprof user keeps just those samples.
	top := pprof("-tagfocus", "unwind_fp=^main$", "-top")
	if !strings.Contains(top, "fp_compare") {
		t.Errorf("go tool pprof -tagfocus unwind_fp=^main$ -top keeps no fp_compare sample:\n%s", top)
	}
}

// TestUnwindCachePrunedAtStart opens a recorder on a cache directory that
// an earlier run left over --cache-size: the least recently used table
// files are removed before anything is recorded, and counted.
func TestUnwindCachePrunedAtStart(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	tables := filepath.Join(dir, "unwind")
	if err := os.MkdirAll(tables, 0o755); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	for i := range 3 { // the first the least recently used
		file := filepath.Join(tables, fmt.Sprintf("%016x.table", i+1))
		if err := os.WriteFile(file, make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		mtime := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(file, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	cfg := profiler.Config{Frequency: 99, PIDs: []uint32{uint32(os.Getpid())}, Stacks: profiler.StacksUser,
		Unwind: profiler.UnwindDWARF, UnwindCacheDir: dir, UnwindCacheMaxBytes: 2500}
	rec, err := Open(cfg, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	st, err := rec.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Unwind.Enabled {
		t.Skip("the kernel walks user stacks with frame pointers only")
	}
	if st.Unwind.CachePrunedFiles != 1 || st.Unwind.CachePrunedBytes != 1000 {
		t.Errorf("%d files of %d bytes pruned, want 1 of 1000", st.Unwind.CachePrunedFiles, st.Unwind.CachePrunedBytes)
	}
	left, _ := filepath.Glob(filepath.Join(tables, "*.table"))
	want := []string{filepath.Join(tables, "0000000000000002.table"), filepath.Join(tables, "0000000000000003.table")}
	if !slices.Equal(left, want) {
		t.Errorf("tables left %v, want %v", left, want)
	}
}
