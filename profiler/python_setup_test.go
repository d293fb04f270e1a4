package profiler

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/symbolize"
)

// TestPythonSetUpAtFirstRequest: a new process whose mappings (the
// symbolizer's read, handed on) show a Python interpreter has its entry
// written, with its interpreter, at the poll after its first request,
// though it was sampled once: the sampler walks its Python frames only
// from then on, and a process waiting for a second sample waited for the
// next poll (250 ms) with none. A native process sampled once still waits
// (askSamples: under churn most exit soon).
func TestPythonSetUpAtFirstRequest(t *testing.T) {
	bpftest.Require(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s here: %v", python, err)
	}
	py := startPython(t, "debian-3.11", python, "pychains.py")
	native, _ := sleepWithLibc(t)
	procs := newProcsMap(t, 16)
	u := newSetUpTestUnwinder(t, procs)
	now := time.Now()
	u.lastTake = now // the ring reader took the requests just now
	u.drainedTake = now
	for _, pid := range []uint32{py.Pid, native} {
		u.taken = append(u.taken, taken{pid: pid, mm: 0x1000, at: now, byReader: true})
		u.newHeat[pid] = 1 // the sample that asked, and no other yet
	}
	u.state.Lock() // the worker's, released while it loads a table
	u.poll(now)
	u.state.Unlock()
	var e bpf.ProfileHsProc
	if err := procs.Lookup(py.Pid, &e); err != nil {
		t.Fatalf("the Python process, sampled once, has no entry after the poll that took its request: %v", err)
	}
	if e.PyRuntime == 0 {
		t.Errorf("the Python process's entry names no interpreter (%d mappings)", e.Count)
	}
	if err := procs.Lookup(native, &e); err == nil {
		t.Errorf("the native process, sampled once, got its entry at once: it should wait for a second sample or %v", askWait)
	}
	if _, ok := u.asks[native]; !ok {
		t.Errorf("the native process's request was dropped, not kept for a later poll")
	}
	if u.stats.MapsReads != 1 || u.stats.MapsShared != 1 {
		t.Errorf("maps taken %d (shared %d), want the Python process's one, the symbolizer's read", u.stats.MapsReads, u.stats.MapsShared)
	}
}

// newSetUpTestUnwinder returns an unwinder writing entries to procs, with
// a Python finder, given each process's maps as the symbolizer would have
// read them at its first sample.
func newSetUpTestUnwinder(t testing.TB, procs *ebpf.Map) *unwinder {
	t.Helper()
	pending, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pending.Close() })
	return &unwinder{
		procs: procs, pending: pending, log: slog.New(slog.DiscardHandler), procRoot: "/proc", done: make(chan struct{}),
		files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{}, failed: map[string]bool{}, deferred: map[string]time.Time{},
		procList: map[uint32]*procState{}, queue: map[string]*buildJob{}, heat: map[uint32]uint64{}, newHeat: map[uint32]uint64{},
		asks: map[uint32]ask{}, pendKeys: make([]uint32, maxPending), pendVals: make([]uint64, maxPending),
		pyWake: make(chan struct{}, 1), python: newTestFinder(t),
		recentMaps: func(dst []symbolize.ExecMapping, pid uint32, _ time.Time) ([]symbolize.ExecMapping, bool) {
			maps, err := symbolize.ReadExecMappings(fmt.Sprintf("/proc/%d/maps", pid))
			if err != nil {
				return dst, false
			}
			return append(dst, maps...), true
		},
	}
}

// TestPythonSetUpAfterWalkOff: once the table walk was turned off on this
// kernel (checkWalk: every entry deleted, none written again), the Python
// set-up, which runs beside the worker, writes no entry either.
func TestPythonSetUpAfterWalkOff(t *testing.T) {
	bpftest.Require(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s here: %v", python, err)
	}
	py := startPython(t, "debian-3.11", python, "pychains.py")
	procs := newProcsMap(t, 16)
	u := newSetUpTestUnwinder(t, procs)
	now := time.Now()
	u.lastTake, u.drainedTake = now, now
	u.taken = append(u.taken, taken{pid: py.Pid, mm: 0x1000, at: now, byReader: true})
	u.off = true
	u.setUpPython(now)
	var e bpf.ProfileHsProc
	if err := procs.Lookup(py.Pid, &e); err == nil {
		t.Fatal("an entry was written for a Python process after the table walk was turned off")
	}
	u.off = false // the check can fail: with the walk on, the same request sets it up
	u.setUpPython(now)
	if err := procs.Lookup(py.Pid, &e); err != nil || e.PyRuntime == 0 {
		t.Fatalf("with the walk on, the Python process was not set up: %v (runtime %#x)", err, e.PyRuntime)
	}
}

// TestPythonSetUpInDynamicLoader: a shared-library build's python3.11
// (pyenv's) sampled before its dynamic loader mapped libpython, where
// the interpreter is, has its entry written then without one; it gets
// its interpreter once the library is mapped, by the set-up alone, with
// no further request (the sampler's next, a pc in the library, came at
// the ring reader's next poll, and the worker read the process again
// only a second after its first read: over a second with no Python
// frames). The process is held at its exec with ptrace, as the sampler
// may find it.
func TestPythonSetUpInDynamicLoader(t *testing.T) {
	bpftest.Require(t)
	const launcher = "/root/.pyenv/versions/3.11.7/bin/python3.11"
	if _, err := os.Stat(launcher); err != nil {
		t.Skipf("no pyenv shared-library build of 3.11 here: %v", err)
	}
	// The tracer is the thread that started the process: it alone may
	// let it go on.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(launcher, "-c", "import time; time.sleep(60)")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		t.Fatalf("the traced process did not stop at its exec: %v (%v)", err, ws)
	}
	maps, err := symbolize.ReadExecMappings(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(maps, func(m symbolize.ExecMapping) bool { return strings.Contains(m.Path, "libpython") }) {
		t.Fatalf("libpython is mapped at the exec already: %+v", maps)
	}

	procs := newProcsMap(t, 16)
	u := newSetUpTestUnwinder(t, procs)
	now := time.Now()
	u.lastTake, u.drainedTake = now, now
	u.taken = append(u.taken, taken{pid: uint32(pid), mm: 0x1000, at: now, byReader: true})
	go u.runPythonSetUp()
	t.Cleanup(func() {
		close(u.done)
		u.state.Lock() // the set-up has returned, or waits for done
		u.state.Unlock()
	})
	u.pyWake <- struct{}{}
	var e bpf.ProfileHsProc
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		u.state.Lock()
		err := procs.Lookup(uint32(pid), &e)
		u.state.Unlock()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Python process held at its exec got no entry: %v", err)
		}
	}
	if e.PyRuntime != 0 {
		t.Fatalf("the entry written at the exec names an interpreter (%#x): libpython was not mapped", e.PyRuntime)
	}
	if err := syscall.PtraceDetach(pid); err != nil {
		t.Fatalf("let the process go on: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); e.PyRuntime == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			maps, _ := symbolize.ReadExecMappings(fmt.Sprintf("/proc/%d/maps", pid))
			t.Fatalf("the process's entry names no interpreter 10 s after it went on (libpython mapped now: %v)",
				slices.ContainsFunc(maps, func(m symbolize.ExecMapping) bool { return strings.Contains(m.Path, "libpython") }))
		}
		u.state.Lock()
		if err := procs.Lookup(uint32(pid), &e); err != nil {
			t.Fatal(err)
		}
		u.state.Unlock()
	}
}
