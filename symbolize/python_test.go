package symbolize

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/pyfixture"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/sample"
)

func native(names ...string) []sample.Frame {
	var fs []sample.Frame
	for _, n := range names {
		fs = append(fs, sample.Frame{Function: n, Module: "/usr/bin/python3.11", Kind: sample.KindUser})
	}
	return fs
}

func kernelFrames(names ...string) []sample.Frame {
	var fs []sample.Frame
	for _, n := range names {
		fs = append(fs, sample.Frame{Function: n, Module: sample.KernelModule, Kind: sample.KindKernel})
	}
	return fs
}

// pyChain returns Python frames named by names, leaf first; a name ending
// in "!" is an entry frame, one starting with "?" an incomplete frame.
func pyChain(names ...string) []pyFrame {
	var fs []pyFrame
	for _, n := range names {
		entry, incomplete := strings.HasSuffix(n, "!"), strings.HasPrefix(n, "?")
		n = strings.Trim(n, "!?")
		fs = append(fs, pyFrame{frame: sample.Frame{Function: n, Module: "/srv/app.py", Kind: sample.KindPython},
			entry: entry, incomplete: incomplete})
	}
	return fs
}

func names(fs []sample.Frame) []string {
	var out []string
	for _, f := range fs {
		n := f.Function
		if f.Kind == sample.KindPython {
			n = "py:" + n
		}
		out = append(out, n)
	}
	return out
}

func TestInterleave(t *testing.T) {
	for _, c := range []struct {
		name   string
		stack  []sample.Frame
		kernel int
		py     []string
		want   []string
		placed bool
	}{{
		name:   "pure Python, under kernel frames",
		stack:  append(kernelFrames("asm_sysvec_apic_timer_interrupt"), native(evalLoop, "PyEval_EvalCode", "run_mod", "main")...),
		kernel: 1,
		py:     []string{"inner", "middle", "outer", "<module>!"},
		want:   []string{"asm_sysvec_apic_timer_interrupt", "py:inner", "py:middle", "py:outer", "py:<module>", "PyEval_EvalCode", "run_mod", "main"},
		placed: true,
	}, {
		name:   "a C extension called from Python",
		stack:  native("deflate_slow", "deflate", "zlib_Compress", "cfunction_vectorcall_FASTCALL_KEYWORDS", evalLoop, "PyEval_EvalCode", "main"),
		py:     []string{"compress_loop", "main", "<module>!"},
		want:   []string{"deflate_slow", "deflate", "zlib_Compress", "cfunction_vectorcall_FASTCALL_KEYWORDS", "py:compress_loop", "py:main", "py:<module>", "PyEval_EvalCode", "main"},
		placed: true,
	}, {
		name:   "Python called back from C",
		stack:  native(evalLoop, "_PyEval_Vector", "PyObject_Call", "builtin_sorted", evalLoop, "PyEval_EvalCode", "main"),
		py:     []string{"key!", "sorter", "<module>!"},
		want:   []string{"py:key", "_PyEval_Vector", "PyObject_Call", "builtin_sorted", "py:sorter", "py:<module>", "PyEval_EvalCode", "main"},
		placed: true,
	}, {
		name:   "a native stack cut short",
		stack:  native("deflate", evalLoop),
		py:     []string{"compress!", "caller", "<module>!"},
		want:   []string{"deflate", "py:compress", "py:caller", "py:<module>"},
		placed: false,
	}, {
		name:   "a Python chain cut short",
		stack:  native(evalLoop, "builtin_sorted", evalLoop, "main"),
		py:     []string{"key"},
		want:   []string{"py:key", "builtin_sorted", evalLoop, "main"},
		placed: false,
	}, {
		name:   "incomplete frames delimit their run, unseen",
		stack:  native(evalLoop, "_PyEval_Vector", evalLoop, "main"),
		py:     []string{"?being_called!", "caller", "?setup", "<module>!"},
		want:   []string{"_PyEval_Vector", "py:caller", "py:<module>", "main"},
		placed: true,
	}, {
		name:   "no user stack",
		stack:  kernelFrames("do_syscall_64"),
		kernel: 1,
		py:     []string{"inner", "outer!"},
		want:   []string{"do_syscall_64", "py:inner", "py:outer"},
		placed: false,
	}} {
		py := pyChain(c.py...)
		in := slices.Clone(c.stack)
		got, placed := interleave(c.stack, c.kernel, py)
		if !slices.Equal(names(got), c.want) || placed != c.placed {
			t.Errorf("%s:\n got %v (placed %v)\nwant %v (placed %v)", c.name, names(got), placed, c.want, c.placed)
		}
		if !slices.Equal(names(in), names(c.stack)) {
			t.Errorf("%s: the stack given was modified", c.name)
		}
	}
}

// interpreterBinary returns the file of pid's mappings that holds the
// evaluation loop: libpython3.X.so where it maps one, else the executable.
func interpreterBinary(t testing.TB, pid int) string {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && strings.Contains(fields[5], "libpython") {
			return fields[5]
		}
	}
	return exe
}

// TestPythonRealProcess names the Python frames of a running busy loop
// three calls deep, under each interpreter installed, reading its code
// objects from its memory, and puts them in place of the evaluation loop
// in a native stack of the interpreter's real addresses. Its code objects
// are read once, and again only when its mappings change (as after an
// exec); once the process has exited, and once its exit snapshot replaced
// its mappings, the names read stay until the process is forgotten.
func TestPythonRealProcess(t *testing.T) {
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			proc := pyfixture.Start(t, py, "busy.py")
			pid := uint32(proc.PID)
			s, stack := symbolizeInterpreter(t, pid)
			if got := names(stack); !slices.Equal(got, []string{evalLoop, "PyEval_EvalCode", "Py_RunMain"}) {
				t.Fatalf("native stack %v", got)
			}
			var raw []pyinterp.Frame
			for i, in := range proc.Lines {
				raw = append(raw, pyinterp.Frame{Code: in.Code, Offset: uint32(in.Lasti), Entry: i == len(proc.Lines)-1})
			}
			check := func(when string) {
				t.Helper()
				got := s.Python(pid, stack, 0, raw)
				want := []string{"py:inner", "py:middle", "py:outer", "PyEval_EvalCode", "Py_RunMain"}
				if !slices.Equal(names(got), want) {
					t.Fatalf("%s: %v, want %v", when, names(got), want)
				}
				for i, in := range proc.Lines {
					f := got[i]
					if f.Module != proc.File || int(f.Line) != in.Line || f.Kind != sample.KindPython {
						t.Errorf("%s: %s in %s at line %d, want %s at line %d", when, f.Function, f.Module, f.Line, proc.File, in.Line)
					}
				}
			}
			check("running")
			// The same mappings read again: the code objects stay cached.
			p := s.process(pid)
			p.mu.Lock()
			s.readMaps(p)
			p.mu.Unlock()
			check("its mappings read again")
			if st := s.Stats(); st.PythonCode.Misses != 3 {
				t.Errorf("%d code objects read after the same mappings were read again, want the first 3", st.PythonCode.Misses)
			}
			// New mappings (as after an exec): read again.
			p.mu.Lock()
			p.maps = append(slices.Clone(p.maps), userMapping{mapping: mapping{start: 1 << 46, end: 1<<46 + 4096, exec: true}})
			p.version = s.versions.Add(1)
			p.mu.Unlock()
			check("new mappings")
			if st := s.Stats(); st.PythonCode.Misses != 6 {
				t.Errorf("%d code objects read after the mappings changed, want 6", st.PythonCode.Misses)
			}
			_ = proc.Cmd.Process.Kill()
			_ = proc.Cmd.Wait()
			check("after the exit")
			// The exit snapshot's mappings (a new version of them) do not
			// lose what was read while the process lived.
			s.SetMaps(pid, nil)
			check("after the exit snapshot")
			st := s.Stats()
			if st.PythonFrames != 15 || st.PythonUnknown != 0 || st.PythonMisplaced != 0 || st.PythonCode.Misses != 6 || st.PythonCode.Hits != 9 {
				t.Errorf("stats %+v", st)
			}
			if n := s.ForgetExited(0); n != 1 {
				t.Errorf("ForgetExited forgot %d processes, want 1", n)
			}
			if st := s.Stats(); st.PythonCode.Codes != 0 {
				t.Errorf("%d code objects cached after the process was forgotten", st.PythonCode.Codes)
			}
		})
	}
}

// TestPythonIncompleteFrames names the frames of a running program's
// code objects under each interpreter installed, one of them the
// innermost of its call (pyinterp.Frame.MayBeIncomplete): hidden while its
// instruction is before its code's first traceable one (a function with a
// cell, whose MAKE_CELL comes first), shown from that instruction on; a
// frame the sampler does not mark is shown wherever it is.
func TestPythonIncompleteFrames(t *testing.T) {
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			proc := pyfixture.Start(t, py, "setup.py")
			pid := uint32(proc.PID)
			s, stack := symbolizeInterpreter(t, pid)
			first := uint32(2 * proc.Traceable["with_cell"])
			if first == 0 {
				t.Fatalf("with_cell's first traceable instruction is its first: %v", proc.Traceable)
			}
			for _, c := range []struct {
				offset uint32
				want   []string
			}{
				{pyinterp.NoInstr, []string{"py:generator", "py:plain", "PyEval_EvalCode", "Py_RunMain"}},
				{first - 2, []string{"py:generator", "py:plain", "PyEval_EvalCode", "Py_RunMain"}},
				{first, []string{"py:with_cell", "py:generator", "py:plain", "PyEval_EvalCode", "Py_RunMain"}},
			} {
				raw := []pyinterp.Frame{
					{Code: proc.Codes["with_cell"], Offset: c.offset, MayBeIncomplete: true},
					// Before its first traceable instruction, unmarked.
					{Code: proc.Codes["generator"], Offset: 0},
					{Code: proc.Codes["plain"], Offset: 0, Entry: true, MayBeIncomplete: true},
				}
				got := names(s.Python(pid, stack, 0, raw))
				if !slices.Equal(got, c.want) {
					t.Errorf("with_cell at byte %d (first traceable %d): %v, want %v", c.offset, first, got, c.want)
				}
			}
			if st := s.Stats(); st.PythonUnknown != 0 || st.PythonMisplaced != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// BenchmarkPython is the symbolizer's cost of a sample's Python frames
// once their code objects are cached: three frames of a running busy loop
// named and put in place of the evaluation loop in a native stack of
// three frames; reported per Python frame.
//
//	go test ./symbolize/ -run '^$' -bench Python -count 6
func BenchmarkPython(b *testing.B) {
	proc := pyfixture.Start(b, pyfixture.Interpreters[0], "busy.py")
	pid := uint32(proc.PID)
	s := New(nil, Options{})
	s.Observe(pid, "python3")
	stack := native(evalLoop, "PyEval_EvalCode", "Py_RunMain")
	var raw []pyinterp.Frame
	for i, in := range proc.Lines {
		raw = append(raw, pyinterp.Frame{Code: in.Code, Offset: uint32(in.Lasti), Entry: i == len(proc.Lines)-1})
	}
	if got := s.Python(pid, stack, 0, raw); len(got) != 5 || got[0].Function != "inner" {
		b.Fatalf("%v", names(got))
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Python(pid, stack, 0, raw)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(raw)), "ns/frame")
}

// TestPythonMapsReadInDynamicLoader: a shared-library build's process
// whose mappings the symbolizer read before its dynamic loader mapped
// libpython (its first sample came that early) names its Python frames
// at its first sample that has them: the mappings, which show no
// interpreter, are read again then. They were read again only once an
// address fell outside them and a mapsRefreshInterval had passed, every
// Python frame "[python+0x…]" until then.
func TestPythonMapsReadInDynamicLoader(t *testing.T) {
	py := pyfixture.Interpreters[1] // pyenv's 3.11, a shared-library build
	proc := pyfixture.Start(t, py, "busy.py")
	pid := uint32(proc.PID)
	s := New(nil, Options{})
	s.Observe(pid, "python3")
	// The read as it was in the dynamic loader: libpython not mapped.
	p := s.process(pid)
	p.mu.Lock()
	early := slices.DeleteFunc(slices.Clone(p.maps), func(m userMapping) bool { return strings.Contains(m.path, "libpython") })
	if len(early) == len(p.maps) {
		p.mu.Unlock()
		t.Fatalf("%s maps no libpython: %+v", py.Path, p.maps)
	}
	p.maps, p.version = early, s.versions.Add(1)
	p.readAt = p.readAt.Add(-time.Second)
	p.mu.Unlock()
	var raw []pyinterp.Frame
	for i, in := range proc.Lines {
		raw = append(raw, pyinterp.Frame{Code: in.Code, Offset: uint32(in.Lasti), Entry: i == len(proc.Lines)-1})
	}
	got := s.Python(pid, native(evalLoop), 0, raw)
	if want := []string{"py:inner", "py:middle", "py:outer"}; !slices.Equal(names(got), want) {
		t.Fatalf("first sample with Python frames: %v, want %v", names(got), want)
	}
	if st := s.Stats(); st.PythonUnknown != 0 {
		t.Errorf("%d Python frames unnamed", st.PythonUnknown)
	}
}

// symbolizeInterpreter returns a new Symbolizer that observed the Python
// process pid, and its symbolized interpreterStack.
func symbolizeInterpreter(t *testing.T, pid uint32) (*Symbolizer, []sample.Frame) {
	t.Helper()
	s := New(nil, Options{})
	s.Observe(pid, "python3")
	return s, s.Symbolize(pid, nil, interpreterStack(t, pid))
}

// interpreterStack returns a native stack of the interpreter's real
// addresses in the process pid, innermost first: the evaluation loop,
// PyEval_EvalCode and Py_RunMain, each at the middle of its function in
// the interpreter's binary.
func interpreterStack(t *testing.T, pid uint32) []uint64 {
	t.Helper()
	bin := interpreterBinary(t, int(pid))
	var user []uint64
	for _, fn := range []string{evalLoop, "PyEval_EvalCode", "Py_RunMain"} {
		sym := dynSymbol(t, bin, fn)
		user = append(user, runtimeAddr(t, pid, bin, sym.Value+sym.Size/2))
	}
	return user
}
