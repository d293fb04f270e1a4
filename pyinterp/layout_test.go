package pyinterp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// installed is a CPython of this machine: the program to run and the
// binary that holds _PyRuntime (the program itself, or its libpython).
type installed struct {
	name, python, lib string
	minor             uint8
}

var interpreters = []installed{
	{"debian-3.11", "/usr/bin/python3.11", "/usr/bin/python3.11", 11},
	{"pyenv-3.11", "/root/.pyenv/versions/3.11.7/bin/python3.11", "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0", 11},
	{"pyenv-3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12", "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0", 12},
	{"pyenv-3.13", "/root/.pyenv/versions/3.13.0/bin/python3.13", "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0", 13},
}

func (p installed) need(t *testing.T) {
	t.Helper()
	for _, f := range []string{p.python, p.lib} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("%s is not installed here: %v", p.name, err)
		}
	}
}

// TestLayoutAgainstRunningInterpreters runs each interpreter installed
// here with a script that reads its own thread state, frames, code objects
// and strings at the offsets found for its binary (Open) and compares
// what it reads with what Python says (id(), len(), the thread's native
// id, PyThreadState_Get()).
func TestLayoutAgainstRunningInterpreters(t *testing.T) {
	for _, p := range interpreters {
		t.Run(p.name, func(t *testing.T) {
			p.need(t)
			in, err := Open(p.lib)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if in.Version.Major != 3 || in.Version.Minor != p.minor {
				t.Fatalf("version %s, want 3.%d", in.Version, p.minor)
			}
			if len(in.Mismatches) > 0 {
				t.Errorf("the table differs from _Py_DebugOffsets: %v", in.Mismatches)
			}
			if p.minor >= 13 && !in.DebugOffsets {
				t.Errorf("3.%d: _Py_DebugOffsets not read", p.minor)
			}
			layout, err := json.Marshal(in.Layout)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(p.python, "testdata/layoutcheck.py", string(layout)).Output()
			if err != nil {
				t.Fatalf("%s testdata/layoutcheck.py: %v", p.python, err)
			}
			var res struct {
				HexVersion uint32 `json:"hexversion"`
				Checks     []struct {
					Name      string `json:"name"`
					OK        bool   `json:"ok"`
					Got, Want string
				} `json:"checks"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("the script's output %q: %v", out, err)
			}
			if v := VersionFromHex(res.HexVersion); v != in.Version {
				t.Errorf("Py_Version says %s, the running interpreter's sys.hexversion %s", in.Version, v)
			}
			if len(res.Checks) < 19 {
				t.Fatalf("the script made %d checks, want 19 or more: %s", len(res.Checks), out)
			}
			for _, c := range res.Checks {
				if !c.OK {
					t.Errorf("%s: read %s, want %s", c.Name, c.Got, c.Want)
				}
			}
		})
	}
}

func TestOpenNotInterpreter(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(self); !errors.Is(err, ErrNotInterpreter) {
		t.Fatalf("Open(the test binary): %v, want ErrNotInterpreter", err)
	}
	if _, err := Open("testdata/no-such-file"); err == nil || errors.Is(err, ErrNotInterpreter) {
		t.Fatalf("Open(a missing file): %v, want the open error", err)
	}
}

// TestOpenLauncher: a shared-library build's python3.X holds no CPython
// but links the libpython that does: ErrLauncher, and still
// ErrNotInterpreter; a binary that links none (the test binary) is not a
// launcher.
func TestOpenLauncher(t *testing.T) {
	const launcher = "/root/.pyenv/versions/3.11.7/bin/python3.11"
	if _, err := os.Stat(launcher); err != nil {
		t.Skipf("no pyenv shared-library build of 3.11 here: %v", err)
	}
	_, err := Open(launcher)
	if !errors.Is(err, ErrLauncher) || !errors.Is(err, ErrNotInterpreter) {
		t.Fatalf("Open(%s): %v, want ErrLauncher and ErrNotInterpreter", launcher, err)
	}
	if !strings.Contains(err.Error(), "libpython3.11.so") {
		t.Errorf("Open(%s): %v, want the library named", launcher, err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(self); errors.Is(err, ErrLauncher) {
		t.Errorf("Open(the test binary): %v, want no ErrLauncher", err)
	}
}

// TestOpenUnsupported: 3.10 has no Py_Version, and no table entry; its
// version comes from the soname.
func TestOpenUnsupported(t *testing.T) {
	const lib = "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0"
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("no CPython 3.10 here: %v", err)
	}
	in, err := Open(lib)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Open(3.10): %v, want ErrUnsupported", err)
	}
	// The soname says 3.10, not which 3.10: the version is not shown as
	// 3.10.0 (a warning named this 3.10.13 "3.10.0").
	if in == nil || in.Version.Major != 3 || in.Version.Minor != 10 || in.Version.String() != "3.10" {
		t.Fatalf("Open(3.10) found %+v, want version 3.10, its micro version unknown", in)
	}
}

// TestRuntimeAddr: _PyRuntime's address in a process is the file's plus
// the load bias of the mapping; the running interpreter prints its own.
func TestRuntimeAddr(t *testing.T) {
	p := interpreters[2] // a shared library: a bias that is not 0
	p.need(t)
	in, err := Open(p.lib)
	if err != nil {
		t.Fatal(err)
	}
	script := `
import ctypes
rt = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) >= 6 and f[1][2] == "x" and f[5].endswith("` + "libpython3.12.so.1.0" + `"):
        lo, _ = f[0].split("-")
        print(rt, int(lo, 16), int(f[2], 16))
        break
`
	out, err := exec.Command(p.python, "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	var rt, start, off uint64
	if _, err := fmt.Sscan(string(out), &rt, &start, &off); err != nil {
		t.Fatalf("the script's output %q: %v", out, err)
	}
	got, ok := in.RuntimeAddr(start, off)
	if !ok || got != rt {
		t.Fatalf("RuntimeAddr(%#x, %#x) = %#x, %v; the process's _PyRuntime is at %#x", start, off, got, ok, rt)
	}
}

func TestCacheReadsOnce(t *testing.T) {
	p := interpreters[0]
	p.need(t)
	c := NewCache(4)
	id := FileID{Dev: 1, Inode: 2}
	in1, fresh1, err1 := c.Lookup(id, p.lib)
	in2, fresh2, err2 := c.Lookup(id, "testdata/no-such-file")
	if err1 != nil || err2 != nil || !fresh1 || fresh2 || in1 != in2 {
		t.Fatalf("Lookup twice: (%v %v %v), (%v %v %v): want one read, then the cached answer", in1, fresh1, err1, in2, fresh2, err2)
	}
	if _, fresh, err := c.Lookup(FileID{Dev: 1, Inode: 3}, "testdata/no-such-file"); !fresh || err == nil {
		t.Fatalf("Lookup of a missing file: fresh %v, err %v", fresh, err)
	}
	if n := c.Reads(); n != 2 {
		t.Errorf("Reads() = %d after one binary and one missing file, want 2", n)
	}
}

// TestCacheReadsOnceConcurrently: readers asking for one binary at once
// (the sampler's unwinder and the symbolizer share a Cache) read it once,
// the others waiting for that read; one of them is told it read it.
func TestCacheReadsOnceConcurrently(t *testing.T) {
	p := interpreters[0]
	p.need(t)
	c := NewCache(4)
	id := FileID{Dev: 1, Inode: 2}
	const readers = 8
	var (
		wg    sync.WaitGroup
		fresh atomic.Int32
		ins   [readers]*Interpreter
	)
	for i := range readers {
		wg.Go(func() {
			in, f, err := c.Lookup(id, p.lib)
			if err != nil {
				t.Error(err)
			}
			if f {
				fresh.Add(1)
			}
			ins[i] = in
		})
	}
	wg.Wait()
	if n := c.Reads(); n != 1 || fresh.Load() != 1 {
		t.Fatalf("%d readers at once: the file read %d times, %d told they read it; want 1 and 1", readers, n, fresh.Load())
	}
	for i, in := range ins {
		if in == nil || in != ins[0] {
			t.Fatalf("reader %d got %p, reader 0 %p: want the one answer", i, in, ins[0])
		}
	}
}

func TestMayBeInterpreter(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/bin/python3.11":                                                  true,
		"/opt/py/lib/libpython3.12.so.1.0":                                     true,
		"/usr/lib/x86_64-linux-gnu/libc.so.6":                                  false,
		"/home/python/bin/ls":                                                  false,
		"/usr/lib/python3/dist-packages/_x.so":                                 false,
		"/usr/lib/python3.11/lib-dynload/zlib.cpython-311-x86_64-linux-gnu.so": false,
		"/root/.pyenv/versions/3.12.1/bin/python3.12":                          true,
	} {
		if got := MayBeInterpreter(path); got != want {
			t.Errorf("MayBeInterpreter(%q) = %v, want %v", path, got, want)
		}
	}
}
