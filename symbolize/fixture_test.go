package symbolize

import (
	"bufio"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	testfixture "github.com/heatscope/heatscope/internal/fixture"
)

// cSource is the C fixture: a call chain main -> outer -> inner ->
// hot_c_function, an anonymous executable mapping standing in for JIT code,
// and one more such mapping for each line read on stdin. It prints
// "name address" lines, then "ready".
const cSource = `
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

volatile unsigned long sink;

__attribute__((noinline)) void hot_c_function(void) {
	for (int i = 0; i < 1000; i++) sink += i;
}
__attribute__((noinline)) void inner(void) { hot_c_function(); }
__attribute__((noinline)) void outer(void) { inner(); }

static void *map_exec(void) {
	return mmap(NULL, 8192, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

int main(void) {
	outer();
	printf("hot_c_function %p\n", (void *)hot_c_function);
	printf("inner %p\n", (void *)inner);
	printf("jit %p\n", map_exec());
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		printf("jit %p\nready\n", map_exec());
		fflush(stdout);
	}
	for (;;) pause();
}
`

// cxxSource is the C++ fixture: a namespaced class method and a function
// template.
const cxxSource = `
#include <cstdio>
#include <unistd.h>

namespace shapes {
class Circle {
public:
	__attribute__((noinline)) double area(double r) const { return 3.14159 * r * r; }
};
template <typename T> __attribute__((noinline)) T twice(T v) { return v + v; }
}

int main() {
	shapes::Circle c;
	volatile double a = c.area(2.0);
	volatile int t = shapes::twice<int>(21);
	(void)a; (void)t;
	std::printf("ready\n");
	std::fflush(stdout);
	for (;;) pause();
}
`

// goSource is the Go fixture: a hot function that prints its own address.
const goSource = `package main

import (
	"fmt"
	"reflect"
	"time"
)

//go:noinline
func hotGoFunction(n int) int {
	s := 0
	for i := range n {
		s += i
	}
	return s
}

func main() {
	hotGoFunction(1000)
	fmt.Printf("main.hotGoFunction %#x\nready\n", reflect.ValueOf(hotGoFunction).Pointer())
	for {
		time.Sleep(time.Hour)
	}
}
`

// goCgoSource makes the Go fixture a cgo program, linked externally.
const goCgoSource = `package main

// int c_add(int a, int b) { return a + b; }
import "C"

func init() { _ = C.c_add(1, 2) }
`

// run runs a command, failing the test with its output if it fails.
func run(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// fixtureDir returns a fresh directory whose name has spaces, as paths in
// /proc/PID/maps may.
func fixtureDir(t testing.TB) string {
	dir := filepath.Join(t.TempDir(), "fixture dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildC compiles a C or C++ source with frame pointers and no
// optimisation, and returns the binary's path.
func buildC(t testing.TB, compiler, src, file string) string {
	t.Helper()
	return testfixture.BuildC(t, fixtureDir(t), compiler, strings.TrimSuffix(file, filepath.Ext(file)), src, "-O0", "-fno-omit-frame-pointer")
}

// buildGo builds the Go fixture with extra go build arguments, as a cgo
// program if cgo is set.
func buildGo(t testing.TB, cgo bool, args ...string) string {
	t.Helper()
	goTool := testfixture.Tool(t, "go")
	dir := fixtureDir(t)
	files := map[string]string{"go.mod": "module fixture\n\ngo 1.22\n", "main.go": goSource}
	env := []string{"CGO_ENABLED=0"}
	if cgo {
		testfixture.Tool(t, "gcc")
		files["cgo.go"] = goCgoSource
		env = []string{"CGO_ENABLED=1"}
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "fixture")
	run(t, dir, env, goTool, append(append([]string{"build", "-o", bin}, args...), ".")...)
	return bin
}

// fixture is a running fixture process.
type fixture struct {
	t     testing.TB
	cmd   *exec.Cmd
	pid   uint32
	bin   string
	stdin io.WriteCloser
	out   *bufio.Reader
	// vars holds the "name address" lines printed before "ready".
	vars map[string]uint64
}

// start runs bin and waits until it is ready. The process is killed at the
// end of the test.
func start(t testing.TB, bin string) *fixture {
	t.Helper()
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fx := &fixture{t: t, cmd: cmd, pid: uint32(cmd.Process.Pid), bin: bin, stdin: stdin,
		out: bufio.NewReader(stdout), vars: map[string]uint64{}}
	t.Cleanup(fx.kill)
	fx.waitReady()
	return fx
}

// waitReady reads "name address" lines into vars until "ready".
func (fx *fixture) waitReady() {
	fx.t.Helper()
	for {
		line, err := fx.out.ReadString('\n')
		if err != nil {
			fx.t.Fatalf("fixture %s: reading its output: %v", fx.bin, err)
		}
		line = strings.TrimSpace(line)
		if line == "ready" {
			return
		}
		name, val, _ := strings.Cut(line, " ")
		v, err := strconv.ParseUint(strings.TrimPrefix(val, "0x"), 16, 64)
		if err != nil {
			fx.t.Fatalf("fixture printed %q: %v", line, err)
		}
		fx.vars[name] = v
	}
}

// kill kills the process and waits for it.
func (fx *fixture) kill() {
	fx.cmd.Process.Kill()
	fx.cmd.Wait()
}

// elfSymbol returns a function symbol of bin, read independently of the
// code under test.
func elfSymbol(t testing.TB, bin, name string) elf.Symbol {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s
		}
	}
	t.Fatalf("%s has no function symbol %s", bin, name)
	return elf.Symbol{}
}

// dynSymbol returns a function symbol of bin's .dynsym, read independently
// of the code under test.
func dynSymbol(t testing.TB, bin, name string) elf.Symbol {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			return s
		}
	}
	t.Fatalf("%s exports no function %s", bin, name)
	return elf.Symbol{}
}

// libcWrite returns the path of the libc that pid maps, and the runtime
// address of its write function.
func libcWrite(t testing.TB, pid uint32) (libc string, write uint64) {
	t.Helper()
	maps, err := readMapsFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if filepath.Base(m.path) == "libc.so.6" {
			return m.path, runtimeAddr(t, pid, m.path, dynSymbol(t, m.path, "write").Value)
		}
	}
	t.Skipf("pid %d maps no libc.so.6", pid)
	return "", 0
}

// gnuBuildID reads bin's .note.gnu.build-id section directly.
func gnuBuildID(t testing.TB, bin string) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return ""
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(data[16:]) // after namesz, descsz, type and "GNU\0"
}

// mappingOf returns the mapping of bin in pid that holds the file offset
// off.
func mappingOf(t testing.TB, pid uint32, bin string, off uint64) mapping {
	t.Helper()
	maps, err := readMapsFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.path == bin && off >= m.offset && off-m.offset < m.end-m.start {
			return m
		}
	}
	t.Fatalf("pid %d maps no offset %#x of %s", pid, off, bin)
	return mapping{}
}

// runtimeAddr maps the ELF virtual address vaddr of bin to its address in
// process pid: through the PT_LOAD segment to a file offset, then through
// the process's mapping of that offset.
func runtimeAddr(t testing.TB, pid uint32, bin string, vaddr uint64) uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			off := vaddr - p.Vaddr + p.Off
			m := mappingOf(t, pid, bin, off)
			return m.start + off - m.offset
		}
	}
	t.Fatalf("%s: no PT_LOAD holds %#x", bin, vaddr)
	return 0
}

// elfAddr is the reverse of runtimeAddr.
func elfAddr(t testing.TB, pid uint32, bin string, addr uint64) uint64 {
	t.Helper()
	maps, err := readMapsFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, m := range maps {
		if m.path != bin || addr < m.start || addr >= m.end {
			continue
		}
		off := addr - m.start + m.offset
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
				return off - p.Off + p.Vaddr
			}
		}
	}
	t.Fatalf("pid %d: %#x is not in a loaded segment of %s", pid, addr, bin)
	return 0
}

// waitGone waits until /proc/PID is gone.
func waitGone(t testing.TB, pid uint32) {
	t.Helper()
	for range 100 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d still exists", pid)
}

// readMapsFile reads and parses every line of a maps file.
func readMapsFile(path string) ([]mapping, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMaps(nil, data, false, nil)
}
