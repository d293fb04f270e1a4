package profiler

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/fixture"
	"github.com/heatscope/heatscope/internal/pyfixture"
	"github.com/heatscope/heatscope/pyinterp"
)

// pyProgram is a running testdata/pychains.py and what it printed.
type pyProgram struct {
	name string
	cmd  *exec.Cmd
	// started is when it was started, ready when it printed its line
	// (wall time, ns): its threads run their chains from then on.
	started, ready int64
	Pid            uint32 `json:"pid"`
	Version        string `json:"version"`
	Native         uint32 `json:"native"`
	Threads        []struct {
		TID    uint32   `json:"tid"`
		Chain  []uint64 `json:"chain"`
		Module uint64   `json:"module"`
	} `json:"threads"`
}

// startPython runs script (in testdata) with the interpreter at path, in
// a process group of its own (killed whole at the end: a pool's workers
// too), and waits for its line.
func startPython(t testing.TB, name, path, script string, args ...string) *pyProgram {
	t.Helper()
	cmd := exec.Command(path, append([]string{"testdata/" + script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s: reading its line: %v", name, err)
	}
	p := &pyProgram{name: name, cmd: cmd, started: started.UnixNano(), ready: time.Now().UnixNano()}
	if err := json.Unmarshal(line, p); err != nil {
		t.Fatalf("%s printed %q: %v", name, line, err)
	}
	return p
}

// TestPythonFrames samples Python programs run by each interpreter
// installed here, half started before the profiler and half after, each
// with two threads running their own chains of functions, and checks the
// code objects of the Python frames the BPF program read against the ids
// the programs printed, innermost first, with the entry frames where
// _PyEval_EvalFrameDefault calls began.
func TestPythonFrames(t *testing.T) {
	bpftest.Require(t)
	if err := dwarfSupported(); err != nil {
		t.Skipf("the Python walk runs in the table-walking program, which this kernel cannot run: %v", err)
	}
	have := pyfixture.Installed(t)
	var progs []*pyProgram
	for _, py := range have {
		progs = append(progs, startPython(t, py.Name+"/before", py.Path, "pychains.py"))
	}

	p, err := Open(Config{Frequency: 499, Unwind: UnwindDWARF, BPFStats: true})
	if err != nil {
		t.Fatalf("open profiler: %v", err)
	}
	defer p.Close()
	type taken struct {
		Record
		wall int64
	}
	var (
		mu      sync.Mutex
		samples = map[uint32][]taken{} // by tid
		after   = make([]*pyProgram, len(have))
		pools   []*pyProgram
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// After the profiler: processes it has not seen start; the
		// recording goes on for 3 s after the last is ready.
		time.Sleep(300 * time.Millisecond)
		var wg sync.WaitGroup
		for i, py := range have {
			wg.Go(func() {
				p := startPython(t, py.Name+"/after", py.Path, "pychains.py")
				mu.Lock()
				after[i] = p
				mu.Unlock()
			})
			if py.Name == "debian-3.11" || py.Version == "3.13" {
				// A pool's worker, forked after the interpreter
				// started (the oldest and newest versions).
				wg.Go(func() {
					p := startPython(t, py.Name+"/pool", py.Path, "pypool.py")
					mu.Lock()
					pools = append(pools, p)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		time.Sleep(3 * time.Second)
		cancel()
	}()
	err = p.Run(ctx, func(r *Record, wall int64) {
		mu.Lock()
		defer mu.Unlock()
		c := *r
		c.Python = slices.Clone(r.Python)
		c.Kernel, c.User = nil, nil
		samples[r.TID] = append(samples[r.TID], taken{c, wall})
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, a := range after {
		if a == nil {
			t.Fatal("a program started after the profiler did not start")
		}
	}
	progs = append(append(progs, after...), pools...)
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Python walks %d, no thread state %d, read errors %d, truncated %d; interpreters %+v; BPF %v over %d runs",
		st.PythonWalks, st.PythonNoThread, st.PythonReadErrors, st.PythonTruncated, st.Unwind.Python, st.BPFRunTime, st.BPFRunCount)

	var total, totalWhole int
	for _, prog := range progs {
		for i, th := range prog.Threads {
			// The samples after the program was ready, from the
			// first with Python frames: the agent reads a process's
			// mappings after its first samples (askSamples).
			var recs []Record
			for _, r := range samples[th.TID] {
				if r.wall > prog.ready && (len(recs) > 0 || len(r.Python) > 0) {
					recs = append(recs, r.Record)
				}
			}
			if len(recs) == 0 {
				t.Errorf("%s (%s) thread %d: none of its %d samples has Python frames", prog.name, prog.Version, th.TID, len(samples[th.TID]))
				continue
			}
			if i == 0 && strings.HasSuffix(prog.name, "/after") {
				// How soon a new process's samples had their frames.
				all := samples[th.TID]
				firstPy := slices.IndexFunc(all, func(r taken) bool { return len(r.Python) > 0 })
				t.Logf("%s: first sample %v after the start, first with Python frames %v after it (its %dth)",
					prog.name, time.Duration(all[0].wall-prog.started), time.Duration(all[firstPy].wall-all[0].wall), firstPy+1)
			}
			whole := 0
			for _, r := range recs {
				if !r.PythonWalk.Has(PythonWalked) {
					t.Errorf("%s thread %d: a sample after the first with frames was not walked (flags %b)", prog.name, th.TID, r.PythonWalk)
					break
				}
				if len(r.Python) < 3 || !slices.Equal(codes(r.Python[:3]), th.Chain) {
					continue
				}
				whole++
				f := r.Python
				last := f[len(f)-1]
				if !last.Entry {
					t.Errorf("%s thread %d: the outermost frame is no entry frame: %+v", prog.name, th.TID, f)
				}
				// The leaf may have no instruction yet (NoInstr): a sample
				// that caught its call just pushed, before its first
				// instruction ran (CPython sets the frame's instruction
				// pointer one before the code), which the symbolizer
				// hides as incomplete (pysymbol's Code.Incomplete).
				if f[0].Entry || !f[0].MayBeIncomplete {
					t.Errorf("%s thread %d: the leaf frame %+v: want the innermost of its call (may be incomplete), no entry", prog.name, th.TID, f[0])
				}
				if i == 0 && th.Module != 0 {
					// module -> main_top -> map (C) -> main_mid -> main_leaf:
					// leaf and top the innermost frames of their calls.
					if !f[1].Entry || f[2].Entry || len(f) != 4 || f[3].Code != th.Module ||
						f[1].MayBeIncomplete || !f[2].MayBeIncomplete || f[3].MayBeIncomplete {
						t.Errorf("%s main thread: want [leaf (innermost), mid (entry), top (innermost), <module> (entry)], got %+v (module %#x)", prog.name, f, th.Module)
					}
				}
			}
			// A sample may catch the thread between the calls of its
			// loop (in top or mid): most must be in the leaf. A thread
			// of a loaded machine may get few samples: each is judged
			// alone from 5, and all together below.
			totalWhole += whole
			total += len(recs)
			if whole == 0 || len(recs) >= 5 && whole < len(recs)*7/10 {
				t.Errorf("%s (%s) thread %d: %d of %d samples have its chain %x", prog.name, prog.Version, th.TID, whole, len(recs), th.Chain)
			} else {
				t.Logf("%s (%s) thread %d: %d of %d samples have its whole chain", prog.name, prog.Version, th.TID, whole, len(recs))
			}
		}
	}
	if total < 50 || totalWhole < total*8/10 {
		t.Errorf("%d of %d samples of the programs' threads have their chains, want 80%% of 50 or more", totalWhole, total)
	}
	if st.PythonWalks == 0 {
		t.Errorf("no Python walks counted")
	}
}

func codes(f []pyinterp.Frame) []uint64 {
	out := make([]uint64, len(f))
	for i := range f {
		out[i] = f[i].Code
	}
	return out
}

// TestPythonNativeThread: a thread of a Python process that Python does
// not know (a pthread a C library started, spinning in C) has no thread
// state: its samples are walked and say so (PythonNoThread, counted),
// without frames, while the Python thread beside it keeps its chain.
func TestPythonNativeThread(t *testing.T) {
	bpftest.Require(t)
	if err := dwarfSupported(); err != nil {
		t.Skipf("the Python walk runs in the table-walking program, which this kernel cannot run: %v", err)
	}
	py := pyfixture.Interpreters[0] // Debian's python3.11
	pyfixture.Need(t, py)
	lib := fixture.BuildC(t, "", "gcc", "libspin.so", `
#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>
static volatile long tid;
static void *spin(void *arg) { tid = syscall(SYS_gettid); for (;;) {} return arg; }
long start_native(void) { pthread_t t; pthread_create(&t, 0, spin, 0); while (!tid) {} return tid; }
`, "-O1", "-shared", "-fPIC", "-pthread")
	prog := startPython(t, py.Name+"/native", py.Path, "pynative.py", lib)
	p, err := Open(Config{Frequency: 499, Unwind: UnwindDWARF, PIDs: []uint32{prog.Pid}})
	if err != nil {
		t.Fatalf("open profiler: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var native, noThread, pyWalked, pyWhole int
	err = p.Run(ctx, func(r *Record, _ int64) {
		switch r.TID {
		case prog.Native:
			native++
			if r.PythonWalk.Has(PythonWalked) {
				if !r.PythonWalk.Has(PythonNoThread) || len(r.Python) > 0 {
					t.Errorf("a sample of the native thread: walk %b, %d Python frames", r.PythonWalk, len(r.Python))
				}
				noThread++
			}
		case prog.Threads[0].TID:
			if r.PythonWalk.Has(PythonWalked) {
				pyWalked++
				if len(r.Python) >= 2 && slices.Equal(codes(r.Python[:2]), prog.Threads[0].Chain) {
					pyWhole++
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("native thread: %d samples, %d walked without a thread state; Python thread: %d of %d walked samples with its chain; counters: walks %d, no thread %d",
		native, noThread, pyWhole, pyWalked, st.PythonWalks, st.PythonNoThread)
	if noThread < 10 || st.PythonNoThread < uint64(noThread) {
		t.Errorf("%d samples of the native thread walked without a thread state (counted %d), want 10 or more", noThread, st.PythonNoThread)
	}
	if pyWalked < 10 || pyWhole < pyWalked*7/10 {
		t.Errorf("the Python thread: %d of %d walked samples with its chain", pyWhole, pyWalked)
	}
}

// TestPythonDeepChain samples a Python thread 40 calls deep
// (testdata/pydeep.py) with each interpreter installed. Its chain, 41
// frames of down() under <module>, lies on the thread's data stack over
// more than 4 KB, which the walk reads a window of 1 KB at a time
// (py_windows): every frame must be there, in order, with none cut or
// read wrong where a frame falls past a window or a 4 KB block.
func TestPythonDeepChain(t *testing.T) {
	bpftest.Require(t)
	if err := dwarfSupported(); err != nil {
		t.Skipf("the Python walk runs in the table-walking program, which this kernel cannot run: %v", err)
	}
	const depth = 40
	var progs []*pyProgram
	for _, py := range pyfixture.Installed(t) {
		progs = append(progs, startPython(t, py.Name+"/deep", py.Path, "pydeep.py", strconv.Itoa(depth)))
	}
	var pids []uint32
	for _, prog := range progs {
		pids = append(pids, prog.Pid)
	}
	p, err := Open(Config{Frequency: 499, Unwind: UnwindDWARF, PIDs: pids})
	if err != nil {
		t.Fatalf("open profiler: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	walked, whole := map[uint32]int{}, map[uint32]int{}
	var wrong []string
	err = p.Run(ctx, func(r *Record, _ int64) {
		if len(r.Python) == 0 {
			return // before the agent set the process up
		}
		walked[r.PID]++
		f := r.Python
		// down(0) ... down(depth), then <module>.
		ok := len(f) == depth+2 && r.PythonWalk == PythonWalked && f[depth+1].Code != f[0].Code && f[depth+1].Entry
		for i := 1; ok && i <= depth; i++ {
			ok = f[i].Code == f[0].Code && !f[i].MayBeIncomplete
		}
		if ok {
			whole[r.PID]++
		} else if len(wrong) < 5 {
			wrong = append(wrong, fmt.Sprintf("pid %d: %d frames, walk %b, codes %x", r.PID, len(f), r.PythonWalk, codes(f)))
		}
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, prog := range progs {
		n, w := walked[prog.Pid], whole[prog.Pid]
		t.Logf("%s: %d of %d samples with Python frames have the whole chain", prog.name, w, n)
		if n < 10 || w < n*9/10 {
			t.Errorf("%s: %d of %d samples with Python frames have the whole chain of %d frames, want 90%% of 10 or more; first others: %q",
				prog.name, w, n, depth+2, wrong)
		}
	}
}
