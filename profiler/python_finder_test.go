package profiler

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/symbolize"
)

func newTestFinder(t testing.TB) *pythonFinder {
	t.Helper()
	bpftest.Require(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: uint32(binary.Size(bpf.ProfileHsPyLayout{})), MaxEntries: maxPyLayouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return newPythonFinder(m, nil, slog.New(slog.DiscardHandler))
}

// TestPythonFinder finds the interpreter of running Python processes
// (Debian's static python3.11, pyenv's shared 3.12) at the address each
// prints for its own _PyRuntime, shares one layout entry between two
// processes of one version, and opens nothing for a process that maps no
// python binary.
func TestPythonFinder(t *testing.T) {
	f := newTestFinder(t)
	script := `import ctypes, sys
print(ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime")), flush=True)
sys.stdin.read()`
	seen := map[uint32]bool{}
	for _, py := range []string{"/usr/bin/python3.11", "/usr/bin/python3.11", "/root/.pyenv/versions/3.12.1/bin/python3.12"} {
		if _, err := os.Stat(py); err != nil {
			t.Logf("%s skipped: %v", py, err)
			continue
		}
		cmd := exec.Command(py, "-c", script)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); cmd.Wait() })
		var want uint64
		if _, err := fmt.Fscan(out, &want); err != nil {
			t.Fatalf("%s: %v", py, err)
		}
		root := fmt.Sprintf("/proc/%d", cmd.Process.Pid)
		maps, err := symbolize.ReadExecMappings(root + "/maps")
		if err != nil {
			t.Fatal(err)
		}
		rt, idx, ok, _ := f.find(root, maps)
		if !ok || rt != want {
			t.Fatalf("%s: find gives _PyRuntime %#x (found %v), the process says %#x", py, rt, ok, want)
		}
		seen[idx] = true
		var l bpf.ProfileHsPyLayout
		if err := f.layouts.Lookup(idx, &l); err != nil {
			t.Fatal(err)
		}
		if l.FramePrevious == 0 && l.FrameCode == 0 {
			t.Fatalf("%s: py_layouts[%d] is empty", py, idx)
		}
	}
	st := f.Stats()
	if st.Processes == 0 {
		t.Skip("no CPython 3.11 or 3.12 installed here")
	}
	// Two interpreters at most, whatever the number of processes.
	if len(seen) > 2 || st.Interpreters > 2 || st.Unsupported != 0 {
		t.Fatalf("%d layouts used, stats %+v", len(seen), st)
	}

	// A process that maps no python binary: nothing is opened.
	before := f.Stats().Binaries
	maps, err := symbolize.ReadExecMappings("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := f.find("/proc/self", maps); ok {
		t.Fatal("the test binary found as a Python interpreter")
	}
	if got := f.Stats().Binaries; got != before {
		t.Fatalf("%d binaries read for a process without Python", got-before)
	}
}

// TestPythonFinderUnsupported: an interpreter the table does not hold
// (3.10) is read once, warned about once, and gives no entry.
func TestPythonFinderUnsupported(t *testing.T) {
	const lib = "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0"
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("no CPython 3.10 here: %v", err)
	}
	f := newTestFinder(t)
	var logged strings.Builder
	f.log = slog.New(slog.NewTextHandler(&logged, nil))
	maps := []symbolize.ExecMapping{{Start: 0x7f0000000000, End: 0x7f0000100000, Offset: 0x1000, Dev: 1, Inode: 42, Path: lib}}
	for range 3 {
		if _, _, ok, _ := f.find("/proc/self", maps); ok {
			t.Fatal("3.10 found as readable")
		}
	}
	if n := strings.Count(logged.String(), "cannot read"); n != 1 {
		t.Fatalf("%d warnings for one binary, want 1:\n%s", n, logged.String())
	}
	if s := f.Stats(); s.Binaries != 1 || s.Unsupported != 1 || s.Processes != 0 {
		t.Fatalf("stats %+v, want one binary read, unsupported", s)
	}
}

// TestBPFLayoutRefusesFarFields: a layout whose frame fields lie past the
// bytes the sampler reads of a frame is refused, not used.
func TestBPFLayoutRefusesFarFields(t *testing.T) {
	for _, v := range pyinterp.Versions() {
		l, _ := pyinterp.LayoutFor(v)
		if _, err := bpfLayout(l); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		far := l
		far.FrameOwner = pyFrameRead
		if _, err := bpfLayout(far); err == nil {
			t.Fatalf("%s: owner at byte %d accepted", v, pyFrameRead)
		}
		far = l
		far.ThreadNativeID = pyThreadRead - 4
		if _, err := bpfLayout(far); err == nil {
			t.Fatalf("%s: native_thread_id at byte %d accepted", v, far.ThreadNativeID)
		}
	}
}

// BenchmarkPythonFinderNoPython: what finding no interpreter costs the
// entry of a process that maps no python binary (this test's, with its
// libc and loader): a look at each mapping's name.
func BenchmarkPythonFinderNoPython(b *testing.B) {
	f := newTestFinder(b)
	maps, err := symbolize.ReadExecMappings("/proc/self/maps")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, ok, _ := f.find("/proc/self", maps); ok {
			b.Fatal("found")
		}
	}
	b.ReportMetric(float64(len(maps)), "mappings")
}

// TestPythonFinderProcessGone: a process seen only after it exited (its
// mappings from the exit snapshot, its /proc/PID/root gone) tells nothing
// of its interpreter: nothing is warned, and the next process of the same
// binary has its interpreter found (the gone process's "no such file" was
// remembered for the binary, and every later process of it kept native
// frames only).
func TestPythonFinderProcessGone(t *testing.T) {
	const py = "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no %s here: %v", py, err)
	}
	f := newTestFinder(t)
	var logged strings.Builder
	f.log = slog.New(slog.NewTextHandler(&logged, nil))
	cmd := exec.Command(py, "-c", `import ctypes, sys
print(ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime")), flush=True)
sys.stdin.read()`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	var want uint64
	if _, err := fmt.Fscan(out, &want); err != nil {
		t.Fatal(err)
	}
	root := fmt.Sprintf("/proc/%d", cmd.Process.Pid)
	maps, err := symbolize.ReadExecMappings(root + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	// The same mappings through the root of a process that has exited.
	if _, _, ok, _ := f.find("/proc/0", maps); ok {
		t.Fatal("an interpreter found through an exited process's root")
	}
	if strings.Contains(logged.String(), "cannot read") {
		t.Fatalf("an exited process's interpreter warned about as unreadable:\n%s", logged.String())
	}
	rt, _, ok, _ := f.find(root, maps)
	if !ok || rt != want {
		t.Fatalf("the next process of %s: find gives _PyRuntime %#x (found %v), the process says %#x", py, rt, ok, want)
	}
	if s := f.Stats(); s.Unsupported != 0 || s.Processes != 1 {
		t.Fatalf("stats %+v, want no unsupported binary, one process", s)
	}
}
