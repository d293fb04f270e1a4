package pysymbol

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/pyfixture"
	"github.com/heatscope/heatscope/pyinterp"
)

// pythonProcess returns how the resolver reads the running Python process
// pid: its identity and the layout of the interpreter it maps (the
// python3.X executable or libpython3.X.so), found as the sampler finds it.
func pythonProcess(t testing.TB, pid int) Process {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var errs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") || !pyinterp.MayBeInterpreter(fields[5]) {
			continue
		}
		in, err := pyinterp.Open(fields[5])
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		start, err := StartTime("/proc", uint32(pid))
		if err != nil {
			t.Fatal(err)
		}
		return Process{PID: uint32(pid), StartTime: start, Layout: &in.Layout}
	}
	t.Fatalf("no interpreter found in pid %d's mappings: %v", pid, errs)
	return Process{}
}

// defLine returns the line of "def name(" in the script at path.
func defLine(t testing.TB, path, name string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "def "+name+"(") {
			return i + 1
		}
	}
	t.Fatalf("no def %s in %s", name, path)
	return 0
}

// TestCodeOfRunningPython reads the code objects of a running busy loop
// three calls deep from its memory, under each interpreter installed, and
// checks their names, file and first line against the script, and the
// line of instructions the program saw its frames at (f_lasti, f_lineno)
// against the location table read.
func TestCodeOfRunningPython(t *testing.T) {
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			proc := pyfixture.Start(t, py, "busy.py")
			p := pythonProcess(t, proc.PID)
			r := New(0)
			for _, name := range []string{"inner", "middle", "outer"} {
				c, err := r.Code(p, proc.Codes[name])
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if c.Qualname != name || c.File != proc.File || c.FirstLine != defLine(t, proc.File, name) {
					t.Errorf("%s: read %q in %s from line %d, want %s at line %d",
						name, c.Qualname, c.File, c.FirstLine, proc.File, defLine(t, proc.File, name))
				}
			}
			if len(proc.Lines) != 3 {
				t.Fatalf("the program saw %d frames, want 3: %+v", len(proc.Lines), proc.Lines)
			}
			for _, in := range proc.Lines {
				c, err := r.Code(p, in.Code)
				if err != nil {
					t.Fatal(err)
				}
				if line, ok := c.Line(uint32(in.Lasti)); !ok || line != in.Line {
					t.Errorf("%s at byte %d: line %d (ok %v), the program saw %d", in.Func, in.Lasti, line, ok, in.Line)
				}
				// A frame before its first instruction.
				if line, ok := c.Line(pyinterp.NoInstr); !ok || line != c.FirstLine {
					t.Errorf("%s before its first instruction: line %d (ok %v), want %d", in.Func, line, ok, c.FirstLine)
				}
			}
			st := r.Stats()
			if st.Misses != 3 || st.Hits != 3 || st.Codes != 3 || st.Errors != 0 {
				t.Errorf("stats %+v, want 3 misses, 3 hits, 3 cached", st)
			}
		})
	}
}

// TestIncomplete reads the code objects of functions whose frames run
// set-up instructions before their first traceable one (a cell, a
// closure's free variables, a generator) and of one without, under each
// interpreter installed, and checks which offsets Code.Incomplete calls
// incomplete against the first RESUME the program found in each code.
func TestIncomplete(t *testing.T) {
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			proc := pyfixture.Start(t, py, "setup.py")
			p := pythonProcess(t, proc.PID)
			r := New(0)
			if len(proc.Codes) != 4 || len(proc.Traceable) != 4 {
				t.Fatalf("%d code objects, %d first traceable instructions, want 4 each", len(proc.Codes), len(proc.Traceable))
			}
			setUp := 0
			for name, addr := range proc.Codes {
				c, err := r.Code(p, addr)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				first, ok := proc.Traceable[name]
				if !ok {
					t.Fatalf("%s: no first traceable instruction printed", name)
				}
				if !c.Incomplete(pyinterp.NoInstr) {
					t.Errorf("%s: a frame before its first instruction is complete", name)
				}
				if c.Incomplete(uint32(2 * first)) {
					t.Errorf("%s: a frame at its first traceable instruction (byte %d) is incomplete", name, 2*first)
				}
				if first > 0 {
					setUp++
					if !c.Incomplete(uint32(2*first - 2)) {
						t.Errorf("%s: a frame at byte %d, before its first traceable instruction (%d), is complete", name, 2*first-2, 2*first)
					}
				}
			}
			if setUp != 3 {
				t.Errorf("%d functions with set-up instructions, want 3", setUp)
			}
		})
	}
}

// TestStringKinds reads qualified names of each kind of str (ASCII,
// Latin-1, UCS-2, UCS-4) and one longer than the first read of a string.
func TestStringKinds(t *testing.T) {
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			proc := pyfixture.Start(t, py, "names.py")
			p := pythonProcess(t, proc.PID)
			r := New(0)
			if len(proc.Codes) != 5 {
				t.Fatalf("%d code objects, want 5", len(proc.Codes))
			}
			for name, addr := range proc.Codes {
				c, err := r.Code(p, addr)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if c.Qualname != name || filepath.Base(c.File) != "names.py" {
					t.Errorf("read %q in %s, want %q in names.py", c.Qualname, c.File, name)
				}
			}
		})
	}
}

// TestCodeGarbage points the reader at memory that holds no code object:
// a str object, the middle of one, address 0 and an unmapped address.
func TestCodeGarbage(t *testing.T) {
	py := pyfixture.Interpreters[0]
	proc := pyfixture.Start(t, py, "busy.py")
	p := pythonProcess(t, proc.PID)
	r := New(0)
	for _, addr := range []uint64{0, proc.Codes["inner"] + 8, proc.Codes["inner"] + 3, 8} {
		if c, err := r.Code(p, addr); err == nil {
			t.Errorf("code object at %#x read as %+v", addr, c)
		}
	}
	if st := r.Stats(); st.Errors != 4 || st.Codes != 0 {
		t.Errorf("stats %+v, want 4 errors and nothing cached", st)
	}
}

// TestExitedProcess: a process gone is named from the cache for what was
// read while it lived, and reads of it fail with ErrExited, until Forget.
func TestExitedProcess(t *testing.T) {
	py := pyfixture.Interpreters[0]
	proc := pyfixture.Start(t, py, "busy.py")
	p := pythonProcess(t, proc.PID)
	r := New(0)
	if _, err := r.Code(p, proc.Codes["inner"]); err != nil {
		t.Fatal(err)
	}
	_ = proc.Cmd.Process.Kill()
	_ = proc.Cmd.Wait()
	if c, err := r.Code(p, proc.Codes["inner"]); err != nil || c.Qualname != "inner" {
		t.Errorf("after the exit: %v, %v; want inner from the cache", c, err)
	}
	if _, err := r.Code(p, proc.Codes["middle"]); !errors.Is(err, ErrExited) {
		t.Errorf("a code object not read before the exit: %v, want ErrExited", err)
	}
	if n := r.Forget(func(pid uint32, start uint64) bool { return pid == p.PID && start == p.StartTime }); n != 1 {
		t.Errorf("Forget dropped %d, want 1", n)
	}
	if st := r.Stats(); st.Codes != 0 || st.Exited != 1 {
		t.Errorf("stats %+v, want none cached and one read of an exited process", st)
	}
}

// TestImageKeysTheCache: a process's new image (after an exec) does not
// take the old image's code object at the same address from the cache.
func TestImageKeysTheCache(t *testing.T) {
	proc := pyfixture.Start(t, pyfixture.Interpreters[0], "busy.py")
	p := pythonProcess(t, proc.PID)
	r := New(0)
	for range 2 {
		if _, err := r.Code(p, proc.Codes["inner"]); err != nil {
			t.Fatal(err)
		}
	}
	p.Image++
	if _, err := r.Code(p, proc.Codes["inner"]); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Misses != 2 || st.Hits != 1 || st.Codes != 2 {
		t.Errorf("stats %+v, want the new image read (2 misses, 1 hit)", st)
	}
	if n := r.Forget(func(pid uint32, start uint64) bool { return pid == p.PID }); n != 2 {
		t.Errorf("Forget dropped %d, want both images' 2", n)
	}
}
