package recorder

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/pyfixture"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/symbolize"
)

// pyStack is one recorded sample of a Python fixture.
type pyStack struct {
	at       time.Time
	pid, tid uint32
	frames   []sample.Frame // leaf first, as recorded
}

// root returns the stack's frames root first, Python ones as "py:name",
// kernel ones left out.
func (s *pyStack) root() []string {
	var out []string
	for i := len(s.frames) - 1; i >= 0; i-- {
		f := s.frames[i]
		switch f.Kind {
		case sample.KindKernel:
		case sample.KindPython:
			out = append(out, "py:"+f.Function)
		default:
			out = append(out, f.Function)
		}
	}
	return out
}

// kernelOnTop reports whether no kernel frame comes after a user or
// Python one (leaf first).
func (s *pyStack) kernelOnTop() bool {
	user := false
	for _, f := range s.frames {
		if f.Kind == sample.KindKernel && user {
			return false
		}
		user = user || f.Kind != sample.KindKernel
	}
	return true
}

// recordPython records the processes pids with the table walk (which
// reads Python frames) for d.
func recordPython(t *testing.T, pids []uint32, d time.Duration) ([]pyStack, symbolize.Stats, profiler.Stats) {
	t.Helper()
	cfg := profiler.Config{Frequency: 99, PIDs: pids, Unwind: profiler.UnwindDWARF, UnwindCacheDir: t.TempDir()}
	rec, err := Open(cfg, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []pyStack
	err = rec.Run(ctx, func(s *sample.Sample) {
		out = append(out, pyStack{at: time.Unix(0, s.Time), pid: s.PID, tid: s.TID, frames: slices.Clone(s.Stack)})
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rec.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return out, rec.SymbolizerStats(), st
}

// pyCheck judges the samples of one process (or thread) of a fixture: at
// least 90% of them, once the first whole one came (the process's unwind
// tables and interpreter were in), must be whole.
type pyCheck struct {
	name  string
	pid   uint32
	tid   uint32 // 0: every thread
	whole func(s pyStack) bool
	want  string // what whole means, for the message
}

func (c pyCheck) judge(t *testing.T, stacks []pyStack) {
	t.Helper()
	var mine []pyStack
	for _, s := range stacks {
		if s.pid == c.pid && (c.tid == 0 || s.tid == c.tid) {
			mine = append(mine, s)
		}
	}
	first := slices.IndexFunc(mine, c.whole)
	if first < 0 {
		t.Errorf("%s: none of %d samples is whole (%s); e.g. %s", c.name, len(mine), c.want, examplePy(mine))
		return
	}
	judged, whole, onTop := 0, 0, 0
	bad := ""
	for _, s := range mine[first:] {
		judged++
		if c.whole(s) {
			whole++
		} else if bad == "" {
			bad = strings.Join(s.root(), ";")
		}
		if s.kernelOnTop() {
			onTop++
		}
	}
	if judged < 10 {
		t.Errorf("%s: %d samples after the first whole one (%v after its first sample): too few to judge", c.name, judged, mine[first].at.Sub(mine[0].at))
		return
	}
	share := float64(whole) / float64(judged)
	if share < 0.9 {
		t.Errorf("%s: %.1f%% of %d samples whole (%s), want at least 90%%; e.g. %s", c.name, 100*share, judged, c.want, bad)
	}
	if onTop != judged {
		t.Errorf("%s: %d of %d samples have a kernel frame below a user one", c.name, judged-onTop, judged)
	}
	t.Logf("%s: %.1f%% of %d samples whole, the first %v after the process's first sample (%d before it)",
		c.name, 100*share, judged, mine[first].at.Sub(mine[0].at).Round(time.Millisecond), first)
}

func examplePy(stacks []pyStack) string {
	if len(stacks) == 0 {
		return "no sample"
	}
	return strings.Join(stacks[len(stacks)/2].root(), ";")
}

// pyRun reports whether root holds chain as consecutive frames.
func pyRun(root []string, chain ...string) bool { return inOrder(root, chain...) }

// pyOrder reports whether the Python frames of root, native ones between
// them left out, hold chain as consecutive frames: Python called back
// from C (Thread.run's call of its target goes through _PyEval_Vector in
// 3.11) has native frames between its Python callers and callees.
func pyOrder(root []string, chain ...string) bool {
	var py []string
	for _, f := range root {
		if strings.HasPrefix(f, "py:") {
			py = append(py, f)
		}
	}
	return inOrder(py, chain...)
}

// noEvalLoop reports whether no evaluation-loop frame is left: each was
// replaced by the Python frames that ran in it.
func noEvalLoop(root []string) bool { return !slices.Contains(root, "_PyEval_EvalFrameDefault") }

// nativeAbove reports whether the frames above (leafward of) the Python
// function caller, up to the leaf, are all native, at least one of them
// in a module whose path contains one of modules (or a function whose
// name contains one of funcs).
func nativeAbove(s pyStack, caller string, modules, funcs []string) bool {
	i := slices.IndexFunc(s.frames, func(f sample.Frame) bool { return f.Kind == sample.KindPython && f.Function == caller })
	if i <= 0 {
		return false
	}
	found := false
	for _, f := range s.frames[:i] {
		if f.Kind == sample.KindKernel {
			continue
		}
		if f.Kind == sample.KindPython {
			return false
		}
		for _, m := range modules {
			found = found || strings.Contains(f.Module, m)
		}
		for _, fn := range funcs {
			found = found || strings.Contains(f.Function, fn)
		}
	}
	return found
}

// TestPythonEndToEnd records, with the real sampler, each Python fixture
// under each interpreter installed, and checks that at least 90% of each
// one's samples show its hot Python functions in their nesting order, in
// place of the interpreter's evaluation loop (none left), between the
// interpreter's native frames: a busy loop three calls deep, three threads
// each with its own chain, a forked multiprocessing pool's workers, and
// zlib's and hashlib's native code above the Python function that called
// it.
func TestPythonEndToEnd(t *testing.T) {
	bpftest.Require(t)
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			busy := pyfixture.Start(t, py, "busy.py")
			threads := pyfixture.Start(t, py, "threads.py")
			pool := pyfixture.Start(t, py, "pool.py")
			zlib := pyfixture.Start(t, py, "cext.py", "zlib")
			sha := pyfixture.Start(t, py, "cext.py", "sha256")
			pids := []uint32{uint32(busy.PID), uint32(threads.PID), uint32(zlib.PID), uint32(sha.PID)}
			for _, w := range pool.Workers {
				pids = append(pids, uint32(w))
			}
			stacks, sym, st := recordPython(t, pids, 10*time.Second)
			t.Logf("%d samples; sampler: %d Python walks, %d without a thread state, %d read errors, %d truncated; symbolizer: %d Python frames, %d unknown, %d samples misplaced; code cache %d hits, %d misses",
				len(stacks), st.PythonWalks, st.PythonNoThread, st.PythonReadErrors, st.PythonTruncated,
				sym.PythonFrames, sym.PythonUnknown, sym.PythonMisplaced, sym.PythonCode.Hits, sym.PythonCode.Misses)

			checks := []pyCheck{{
				name: "busy", pid: uint32(busy.PID),
				whole: func(s pyStack) bool {
					r := s.root()
					return pyRun(r, "py:<module>", "py:outer", "py:middle", "py:inner") && noEvalLoop(r) &&
						r[0] != "py:<module>" // native frames below the module's
				},
				want: "<module> -> outer -> middle -> inner below the interpreter's native frames, no evaluation loop left",
			}}
			// Each thread its own chain: judged together (a thread of three
			// behind one GIL can get a handful of samples on this machine),
			// each sample by its own thread's chain.
			chainOf := map[uint32]string{}
			for _, name := range []string{"alpha", "beta", "gamma"} {
				tid := threads.Tids[name]
				if tid == 0 {
					t.Fatalf("threads.py named no thread %s: %v", name, threads.Tids)
				}
				chainOf[uint32(tid)] = name
			}
			threadChains := pyCheck{
				name: "threads", pid: uint32(threads.PID),
				whole: func(s pyStack) bool {
					name, ok := chainOf[s.tid]
					r := s.root()
					return ok && pyOrder(r, "py:Thread.run", "py:"+name, "py:"+name+"_mid", "py:"+name+"_leaf", "py:spin") && noEvalLoop(r)
				},
				want: "each thread's own Thread.run -> NAME -> NAME_mid -> NAME_leaf -> spin, native frames between them allowed",
			}
			checks = append(checks, threadChains)
			for _, w := range pool.Workers {
				checks = append(checks, pyCheck{
					name: "pool worker " + strconv.Itoa(w), pid: uint32(w),
					whole: func(s pyStack) bool { r := s.root(); return pyRun(r, "py:work", "py:crunch") && noEvalLoop(r) },
					want:  "work -> crunch",
				})
			}
			checks = append(checks, cextCheck("zlib", zlib, "compress_loop", []string{"libz"}, []string{"deflate", "compress"}),
				cextCheck("sha256", sha, "hash_loop", []string{"libcrypto", "_sha2", "_sha256"}, []string{"sha256", "SHA256"}))
			for _, c := range checks {
				c.judge(t, stacks)
			}
			for tid, name := range chainOf {
				if !slices.ContainsFunc(stacks, func(s pyStack) bool { return s.tid == tid && threadChains.whole(s) }) {
					t.Errorf("thread %s (tid %d): no sample with its own chain", name, tid)
				}
			}
		})
	}
}

// cextCheck is the check of a C extension's hot loop: <module> -> main ->
// loop in Python, and above loop only native frames, some of them the
// library's.
func cextCheck(name string, p *pyfixture.Process, loop string, modules, funcs []string) pyCheck {
	return pyCheck{
		name: name, pid: uint32(p.PID),
		whole: func(s pyStack) bool {
			r := s.root()
			return pyRun(r, "py:<module>", "py:main", "py:"+loop) && noEvalLoop(r) && nativeAbove(s, loop, modules, funcs)
		},
		want: "<module> -> main -> " + loop + ", then only native frames, " + strings.Join(modules, " or ") + "'s among them",
	}
}
