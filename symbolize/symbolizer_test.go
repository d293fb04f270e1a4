package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	testfixture "github.com/heatscope/heatscope/internal/fixture"
	"github.com/heatscope/heatscope/sample"
)

// startC builds and starts the C fixture.
func startC(t testing.TB) *fixture {
	t.Helper()
	return start(t, buildC(t, "gcc", cSource, "fixture.c"))
}

// cChain returns the user stack of the C fixture, leaf first:
// hot_c_function at its first byte, then inner, outer and main in their
// middle, with the ELF addresses and names to expect.
func cChain(t testing.TB, fx *fixture) (stack, vaddrs []uint64, names []string) {
	names = []string{"hot_c_function", "inner", "outer", "main"}
	for i, name := range names {
		sym := elfSymbol(t, fx.bin, name)
		vaddr := sym.Value
		if i > 0 {
			vaddr += sym.Size / 2
		}
		vaddrs = append(vaddrs, vaddr)
		stack = append(stack, runtimeAddr(t, fx.pid, fx.bin, vaddr))
	}
	return stack, vaddrs, names
}

func TestSymbolizeC(t *testing.T) {
	fx := startC(t)
	s := New(nil, Options{})
	s.Observe(fx.pid, "test")

	stack, vaddrs, names := cChain(t, fx)
	if got, want := stack[0], fx.vars["hot_c_function"]; got != want {
		t.Fatalf("hot_c_function: computed runtime address %#x, the process says %#x", got, want)
	}
	buildID := gnuBuildID(t, fx.bin)
	if buildID == "" {
		t.Fatal("gcc gave the fixture no GNU build id")
	}
	frames := s.Symbolize(fx.pid, nil, stack)
	if len(frames) != len(stack) {
		t.Fatalf("got %d frames for %d addresses", len(frames), len(stack))
	}
	for i, f := range frames {
		want := sample.Frame{Function: names[i], Module: fx.bin, BuildID: buildID, Address: vaddrs[i], Kind: sample.KindUser}
		if f != want {
			t.Errorf("frame %d = %+v, want %+v", i, f, want)
		}
	}
	st := s.Stats()
	if st.FramesResolved != 4 || st.FramesUnknown != 0 || st.MapsReads != 1 || st.Processes != 1 {
		t.Errorf("stats %+v: want 4 frames resolved, 1 maps read, 1 process", st)
	}
}

// TestStackCache checks that a stack symbolized again in the same process
// image comes from the cache, the same frames; that new mappings (a
// snapshot, as after an exec) or an unknown frame are never answered from
// it; and that every cached frame still counts as resolved.
func TestStackCache(t *testing.T) {
	fx := startC(t)
	s := New(nil, Options{})
	s.Observe(fx.pid, "test")
	stack, _, _ := cChain(t, fx)
	first, shared := s.SymbolizeShared(fx.pid, nil, stack)
	if !shared {
		t.Error("a resolved stack, once cached, was not reported shared")
	}
	again, shared := s.SymbolizeShared(fx.pid, nil, stack)
	if !slices.Equal(first, again) || &first[0] != &again[0] || !shared {
		t.Fatalf("the same stack again: %v (shared %v), first %v; want the cached frames", again, shared, first)
	}
	if st := s.Stats(); st.StackCacheHits != 1 || st.FramesResolved != 8 {
		t.Errorf("stats %+v: want 1 stack cache hit, 8 frames resolved", st)
	}
	// A stack with an unknown frame is not cached.
	odd := append(slices.Clone(stack), 0xdead0000)
	s.Symbolize(fx.pid, nil, odd)
	before := s.Stats().StackCacheHits
	if _, shared := s.SymbolizeShared(fx.pid, nil, odd); shared {
		t.Error("a stack with an unknown frame was reported shared")
	}
	if s.Stats().StackCacheHits != before {
		t.Error("a stack with an unknown frame came from the cache")
	}
	// New mappings for the pid: nothing named, since no file is known by
	// that inode; the cached frames must not answer.
	s.SetMaps(fx.pid, []SnapshotMapping{{Start: stack[0] &^ 0xfff, End: stack[0]&^0xfff + 0x1000, Dev: 1, Inode: 1}})
	if f := s.Symbolize(fx.pid, nil, stack); f[0].Function == first[0].Function {
		t.Errorf("after new mappings the stack was named %v, from the cache", f)
	}
}

func TestSymbolizeKernelAndUser(t *testing.T) {
	k, err := LoadKernel("testdata/kallsyms/basic")
	if err != nil {
		t.Fatal(err)
	}
	fx := startC(t)
	s := New(k, Options{})
	stack, _, _ := cChain(t, fx)
	// The second kernel address is a return address at the first byte of
	// helper_local: the call was the last instruction of do_syscall_64.
	frames := s.Symbolize(fx.pid, []uint64{0xffffffffc0200104, 0xffffffff81001100}, stack[:2])
	var got []string
	for _, f := range frames {
		got = append(got, f.Module+" "+f.Function+" "+f.Kind.String())
	}
	want := []string{
		"[mymod] mod_func_b kernel",
		"[kernel.kallsyms] do_syscall_64 kernel",
		fx.bin + " hot_c_function user",
		fx.bin + " inner user",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if frames[1].Address != 0xffffffff81001100 {
		t.Errorf("return address reported as %#x, want it unchanged", frames[1].Address)
	}
}

func TestSymbolizeNilKernel(t *testing.T) {
	frames := New(nil, Options{}).Symbolize(1, []uint64{0xffffffff81001000}, nil)
	want := sample.Frame{Function: "[kernel.kallsyms+0xffffffff81001000]", Module: sample.KernelModule,
		Address: 0xffffffff81001000, Kind: sample.KindKernel}
	if len(frames) != 1 || frames[0] != want {
		t.Errorf("got %+v, want [%+v]", frames, want)
	}
}

// TestReturnAddressMinusOne checks that a caller's return address equal to
// the end of its function (a call as the last instruction) resolves to
// that function, while the same address as a leaf does not.
func TestReturnAddressMinusOne(t *testing.T) {
	fx := startC(t)
	s := New(nil, Options{})
	hot := elfSymbol(t, fx.bin, "hot_c_function")
	inner := elfSymbol(t, fx.bin, "inner")
	end := inner.Value + inner.Size
	leaf := runtimeAddr(t, fx.pid, fx.bin, hot.Value)
	ret := runtimeAddr(t, fx.pid, fx.bin, end)

	frames := s.Symbolize(fx.pid, nil, []uint64{leaf, ret})
	if f := frames[1]; f.Function != "inner" || f.Address != end {
		t.Errorf("return address %#x: got %s at %#x, want inner at %#x", end, f.Function, f.Address, end)
	}
	if f := s.Symbolize(fx.pid, nil, []uint64{ret})[0]; f.Function == "inner" {
		t.Errorf("leaf address %#x, one past inner, resolved to inner", end)
	}
}

func TestSymbolizeCXXDemangles(t *testing.T) {
	bin := buildC(t, "g++", cxxSource, "fixture.cc")
	fx := start(t, bin)
	s := New(nil, Options{})
	for mangled, want := range map[string]string{
		"_ZNK6shapes6Circle4areaEd": "shapes::Circle::area",
		"_ZN6shapes5twiceIiEET_S1_": "shapes::twice<int>",
	} {
		sym := elfSymbol(t, bin, mangled)
		f := s.Symbolize(fx.pid, nil, []uint64{runtimeAddr(t, fx.pid, bin, sym.Value+1)})[0]
		if f.Function != want || f.Address != sym.Value+1 {
			t.Errorf("%s: got %q at %#x, want %q at %#x", mangled, f.Function, f.Address, want, sym.Value+1)
		}
	}
}

func TestSymbolizeGo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cgo     bool
		args    []string
		symtab  bool // whether the binary keeps .symtab
		buildID string
	}{
		{name: "normal", symtab: true, buildID: "gnu"},
		{name: "stripped", args: []string{"-ldflags=-s -w"}, buildID: "gnu"},
		{name: "stripped-pie", args: []string{"-buildmode=pie", "-ldflags=-s -w"}, buildID: "gnu"},
		{name: "stripped-cgo", cgo: true, args: []string{"-ldflags=-s -w"}, buildID: "gnu"},
		{name: "go-build-id-only", args: []string{"-ldflags=-B none"}, symtab: true, buildID: "go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildGo(t, tc.cgo, tc.args...)
			fx := start(t, bin)
			s := New(nil, Options{})
			s.Observe(fx.pid, "test")
			addr := fx.vars["main.hotGoFunction"]
			vaddr := elfAddr(t, fx.pid, bin, addr)
			if tc.symtab {
				if sym := elfSymbol(t, bin, "main.hotGoFunction"); sym.Value != vaddr {
					t.Fatalf("main.hotGoFunction at %#x in .symtab, %#x in the process", sym.Value, vaddr)
				}
			}
			want := gnuBuildID(t, bin)
			if tc.buildID == "go" {
				out, err := exec.Command(testfixture.Tool(t, "go"), "tool", "buildid", bin).Output()
				if err != nil {
					t.Fatal(err)
				}
				want = strings.TrimSpace(string(out))
			}
			if want == "" {
				t.Fatal("the fixture has no build id to compare with")
			}
			// The function's entry as the leaf, and as a return address one
			// byte in (looked up at the entry).
			frames := s.Symbolize(fx.pid, nil, []uint64{addr, addr + 1})
			for i, f := range frames {
				w := sample.Frame{Function: "main.hotGoFunction", Module: bin, BuildID: want, Address: vaddr + uint64(i), Kind: sample.KindUser}
				if f != w {
					t.Errorf("frame %d = %+v, want %+v", i, f, w)
				}
			}
		})
	}
}

func TestSymbolizeAfterExit(t *testing.T) {
	fx := startC(t)
	observed := New(nil, Options{})
	observed.Observe(fx.pid, "test")
	stack, _, _ := cChain(t, fx)
	fx.kill()
	waitGone(t, fx.pid)

	if f := observed.Symbolize(fx.pid, nil, stack)[0]; f.Function != "hot_c_function" || f.Module != fx.bin {
		t.Errorf("observed before exit: got %+v, want hot_c_function in %s", f, fx.bin)
	}
	f := New(nil, Options{}).Symbolize(fx.pid, nil, stack)[0]
	want := sample.Frame{Function: fmt.Sprintf("[unknown+0x%x]", stack[0]), Module: "[unknown]", Address: stack[0]}
	if f != want {
		t.Errorf("first seen after exit: got %+v, want %+v", f, want)
	}
}

func TestSymbolizeDeletedBinary(t *testing.T) {
	fx := startC(t)
	stack, _, _ := cChain(t, fx)
	if err := os.Remove(fx.bin); err != nil {
		t.Fatal(err)
	}
	maps, err := readMapsFile(fmt.Sprintf("/proc/%d/maps", fx.pid))
	if err != nil {
		t.Fatal(err)
	}
	deleted := false
	for _, m := range maps {
		deleted = deleted || m.path == fx.bin && m.deleted
	}
	if !deleted {
		t.Fatalf("maps do not show %s as deleted", fx.bin)
	}
	s := New(nil, Options{})
	if f := s.Symbolize(fx.pid, nil, stack)[0]; f.Function != "hot_c_function" || f.Module != fx.bin {
		t.Errorf("got %+v, want hot_c_function in %s", f, fx.bin)
	}
}

func TestSymbolizePseudoAndUnknown(t *testing.T) {
	fx := startC(t)
	maps, err := readMapsFile(fmt.Sprintf("/proc/%d/maps", fx.pid))
	if err != nil {
		t.Fatal(err)
	}
	var vdso uint64
	for _, m := range maps {
		if m.path == "[vdso]" {
			vdso = m.start
		}
	}
	if vdso == 0 {
		t.Fatal("the fixture has no [vdso] mapping")
	}
	s := New(nil, Options{})
	frames := s.Symbolize(fx.pid, nil, []uint64{vdso + 0x10, 0x10})
	want := []sample.Frame{
		{Function: "[vdso+0x10]", Module: "[vdso]", Address: 0x10, Kind: sample.KindUser},
		{Function: "[unknown+0x10]", Module: "[unknown]", Address: 0x10, Kind: sample.KindUnknown},
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, frames[i], want[i])
		}
	}
	if st := s.Stats(); st.FramesUnknown != 2 {
		t.Errorf("FramesUnknown = %d, want 2", st.FramesUnknown)
	}
}

func TestSymbolizeJIT(t *testing.T) {
	fx := startC(t)
	dir := t.TempDir()
	s := New(nil, Options{PerfMapDir: dir})
	s.Observe(fx.pid, "test")
	jit := fx.vars["jit"]
	perfMap := filepath.Join(dir, fmt.Sprintf("perf-%d.map", fx.pid))
	writeFile(t, perfMap, fmt.Sprintf("%x 40 jit_one\n0x%x 0x20 LazyCompile:*render app.js:12\n", jit, jit+0x40))

	// jit+0x60 is a return address one past the second entry.
	frames := s.Symbolize(fx.pid, nil, []uint64{jit + 0x10, jit + 0x60, jit + 0x200})
	if _, shared := s.SymbolizeShared(fx.pid, nil, []uint64{jit + 0x10, jit + 0x60}); shared {
		t.Error("a stack of JIT frames, all named, was reported shared (perf maps are not cached)")
	}
	want := []sample.Frame{
		{Function: "jit_one", Module: "[jit]", Address: jit + 0x10, Kind: sample.KindJIT},
		{Function: "LazyCompile:*render app.js:12", Module: "[jit]", Address: jit + 0x60, Kind: sample.KindJIT},
		{Function: fmt.Sprintf("[anon+0x%x]", jit+0x200), Module: "[anon]", Address: jit + 0x200, Kind: sample.KindUnknown},
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, frames[i], want[i])
		}
	}

	// The runtime compiles more code and appends it to the map.
	f, err := os.OpenFile(perfMap, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "%x 100 jit_later\n", jit+0x200)
	f.Close()
	if got := s.Symbolize(fx.pid, nil, []uint64{jit + 0x200})[0]; got.Function != "jit_later" || got.Kind != sample.KindJIT {
		t.Errorf("after the perf map grew: got %+v, want jit_later", got)
	}
}

// TestMapsRefresh checks that an address in a mapping made after the maps
// were read is found by one re-read, and that re-reads are rate-limited.
func TestMapsRefresh(t *testing.T) {
	fx := startC(t)
	dir := t.TempDir()
	s := New(nil, Options{PerfMapDir: dir})
	s.Observe(fx.pid, "test")
	fmt.Fprintln(fx.stdin, "map")
	fx.waitReady()
	jit := fx.vars["jit"] // the new mapping
	writeFile(t, filepath.Join(dir, fmt.Sprintf("perf-%d.map", fx.pid)), fmt.Sprintf("%x 40 jit_new\n", jit))

	time.Sleep(mapsRefreshInterval + 100*time.Millisecond)
	before := s.Stats().MapsReads
	if f := s.Symbolize(fx.pid, nil, []uint64{jit})[0]; f.Function != "jit_new" {
		t.Errorf("new mapping: got %+v, want jit_new", f)
	}
	s.Symbolize(fx.pid, nil, []uint64{0x10}) // outside every mapping, right after a re-read
	if reads := s.Stats().MapsReads - before; reads != 1 {
		t.Errorf("%d maps reads for two misses within %v, want 1", reads, mapsRefreshInterval)
	}
}

// TestBinaryCache checks that binaries are loaded when a frame first
// falls in them, not when the process is observed; that a second process
// running a copy of a binary shares the cached symbols (same build id);
// and that a process keeps the binaries the bounded cache evicted.
func TestBinaryCache(t *testing.T) {
	a := startC(t)
	b := startC(t) // another path, the same build id
	libc, write := libcWrite(t, a.pid)
	stack, _, _ := cChain(t, a)

	s := New(nil, Options{MaxBinaries: 1, DebugDir: t.TempDir()}) // libc.so.6 names, whatever -dbg packages are installed
	s.Observe(a.pid, "test")
	if st := s.Stats(); st.BinaryMisses != 0 || st.BinaryHits != 0 || st.BinaryErrors != 0 {
		t.Fatalf("after Observe: %+v, want no binary read yet", st)
	}
	if f := s.Symbolize(a.pid, nil, stack[:1])[0]; f.Function != "hot_c_function" {
		t.Errorf("fixture: got %+v, want hot_c_function", f)
	}
	if f := s.Symbolize(a.pid, nil, []uint64{write})[0]; f.Function != "write" || f.Module != libc {
		t.Errorf("libc: got %+v, want write in %s", f, libc)
	}
	if st := s.Stats(); st.BinaryMisses != 2 || st.Binaries != 1 {
		t.Fatalf("after frames in the fixture and libc: %+v, want 2 binaries loaded, 1 cached", st)
	}
	if f := s.Symbolize(a.pid, nil, stack[:1])[0]; f.Function != "hot_c_function" {
		t.Errorf("evicted binary: got %+v, want hot_c_function", f)
	}
	if st := s.Stats(); st.BinaryMisses != 2 || st.BinaryHits != 0 {
		t.Errorf("the evicted binary was looked up again: %+v", st)
	}

	s = New(nil, Options{})
	s.Symbolize(a.pid, nil, stack)
	stack, _, _ = cChain(t, b)
	if f := s.Symbolize(b.pid, nil, stack)[0]; f.Function != "hot_c_function" || f.Module != b.bin {
		t.Errorf("second process: got %+v, want hot_c_function in %s", f, b.bin)
	}
	if st := s.Stats(); st.BinaryMisses != 1 || st.BinaryHits != 1 {
		t.Errorf("two processes of copies of one binary: %+v, want 1 miss and 1 hit", st)
	}
	s.Observe(b.pid, "test")
	if got := s.Stats(); got.MapsReads != 2 {
		t.Errorf("observing a known pid read its maps again: %d reads, want 2", got.MapsReads)
	}
}

// TestSymbolizeLazilyAfterExit checks that binaries first needed after the
// process exited are still found: Observe keeps only the mappings, and the
// files are then opened by their plain path, being the same device and
// inode.
func TestSymbolizeLazilyAfterExit(t *testing.T) {
	fx := startC(t)
	libc, write := libcWrite(t, fx.pid)
	stack, vaddrs, _ := cChain(t, fx)
	s := New(nil, Options{DebugDir: t.TempDir()}) // names from libc.so.6 itself, whatever -dbg packages are installed
	s.Observe(fx.pid, "test")
	fx.kill()
	waitGone(t, fx.pid)
	if st := s.Stats(); st.BinaryMisses != 0 {
		t.Fatalf("Observe loaded %d binaries, want none", st.BinaryMisses)
	}

	// A leaf in libc's write, called from inner.
	frames := s.Symbolize(fx.pid, nil, []uint64{write + 1, stack[1]})
	want := []sample.Frame{
		{Function: "write", Module: libc, BuildID: gnuBuildID(t, libc), Address: dynSymbol(t, libc, "write").Value + 1, Kind: sample.KindUser},
		{Function: "inner", Module: fx.bin, BuildID: gnuBuildID(t, fx.bin), Address: vaddrs[1], Kind: sample.KindUser},
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, frames[i], want[i])
		}
	}
	if st := s.Stats(); st.BinaryMisses != 2 || st.BinaryErrors != 0 {
		t.Errorf("stats %+v: want 2 binaries loaded, no errors", st)
	}
}

// TestSymbolizeLazilyReplacedFile checks that after the process exited, a
// file replaced at the mapped path (another inode) is not taken for the
// mapped one.
func TestSymbolizeLazilyReplacedFile(t *testing.T) {
	fx := startC(t)
	stack, _, _ := cChain(t, fx)
	s := New(nil, Options{})
	s.Observe(fx.pid, "test")
	fx.kill()
	waitGone(t, fx.pid)
	data, err := os.ReadFile(fx.bin)
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes in another inode, made while the old one exists.
	writeFile(t, fx.bin+".new", string(data))
	if err := os.Rename(fx.bin+".new", fx.bin); err != nil {
		t.Fatal(err)
	}

	f := s.Symbolize(fx.pid, nil, stack[:1])[0]
	if !strings.HasPrefix(f.Function, "[fixture+0x") || f.Module != fx.bin {
		t.Errorf("got %+v, want an unresolved frame in %s", f, fx.bin)
	}
	if st := s.Stats(); st.BinaryErrors != 1 {
		t.Errorf("BinaryErrors = %d, want 1", st.BinaryErrors)
	}
}

// TestBinaryRewrittenInPlace checks that a binary rewritten in place (the
// same inode, other code) is read again for the processes that map the new
// content, though the old one is cached and recognised by stat(2).
func TestBinaryRewrittenInPlace(t *testing.T) {
	old := startC(t)
	s := New(nil, Options{})
	stack, _, _ := cChain(t, old)
	if f := s.Symbolize(old.pid, nil, stack[:1])[0]; f.Function != "hot_c_function" {
		t.Fatalf("before: got %+v", f)
	}
	old.kill()
	waitGone(t, old.pid)

	// The same fixture with one more function in front: every address moves.
	padded := strings.Replace(cSource, "volatile unsigned long sink;",
		"volatile unsigned long sink;\nvoid pad(void) { for (int i = 0; i < 100; i++) sink += i * i; }", 1)
	data, err := os.ReadFile(buildC(t, "gcc", padded, "padded.c"))
	if err != nil {
		t.Fatal(err)
	}
	var before, after syscall.Stat_t
	if err := syscall.Stat(old.bin, &before); err != nil {
		t.Fatal(err)
	}
	writeFile(t, old.bin, string(data)) // truncates: the same inode
	if err := syscall.Stat(old.bin, &after); err != nil || after.Ino != before.Ino {
		t.Fatalf("rewrite: inode %d, was %d, err %v", after.Ino, before.Ino, err)
	}
	fx := start(t, old.bin)
	stack, vaddrs, names := cChain(t, fx)
	for i, f := range s.Symbolize(fx.pid, nil, stack) {
		if f.Function != names[i] || f.Address != vaddrs[i] {
			t.Errorf("frame %d = %+v, want %s at %#x", i, f, names[i], vaddrs[i])
		}
	}
	if st := s.Stats(); st.BinaryMisses != 2 {
		t.Errorf("BinaryMisses = %d, want 2 (the binary before and after the rewrite)", st.BinaryMisses)
	}
}

// TestLibcAliasesLikePerf resolves libc functions that have aliases to the
// name perf report shows for them when it reads the same file (perf 6.1,
// "perf report --symfs" with only libc.so.6, so that libc6-dbg's symbols
// are not used): glibc exports write as the weak __write and write, free
// as __libc_free, cfree and free, and so on.
func TestLibcAliasesLikePerf(t *testing.T) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("no glibc for x86-64 here: %v", err)
	}
	defer f.Close()
	bin, err := loadBinary(f, readBuildID(f), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ function, perf string }{
		{"write", "write"},
		{"read", "read"},
		{"malloc", "malloc"},
		{"free", "cfree"},
		{"getpid", "__getpid"},
		{"nanosleep", "__nanosleep"},
		{"close", "__close"},
		{"open", "open64"},
		{"clock_gettime", "clock_gettime"},
	} {
		sym := dynSymbol(t, path, tc.function)
		if dynSymbol(t, path, tc.perf).Value != sym.Value {
			t.Errorf("%s: this libc has no alias %s, the expectations are for glibc 2.36", tc.function, tc.perf)
			continue
		}
		if got, ok := bin.lookup(sym.Value); got != tc.perf {
			t.Errorf("lookup(%s at %#x) = %q, %v; perf shows %s", tc.function, sym.Value, got, ok, tc.perf)
		}
	}
}

func TestProcessCacheBoundAndForget(t *testing.T) {
	a, b := startC(t), startC(t)
	s := New(nil, Options{MaxProcesses: 1})
	s.Observe(a.pid, "test")
	s.Observe(b.pid, "test")
	if st := s.Stats(); st.Processes != 1 {
		t.Errorf("Processes = %d with MaxProcesses 1", st.Processes)
	}
	s.Forget(b.pid)
	if st := s.Stats(); st.Processes != 0 {
		t.Errorf("Processes = %d after Forget", st.Processes)
	}
}

// TestConcurrentUse runs Observe, Symbolize, Forget and Stats at once; run
// it with -race.
func TestConcurrentUse(t *testing.T) {
	fx := startC(t)
	stack, _, _ := cChain(t, fx)
	s := New(nil, Options{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				s.Observe(fx.pid, "test")
				if f := s.Symbolize(fx.pid, nil, stack)[0]; f.Function != "hot_c_function" {
					t.Errorf("got %+v", f)
					return
				}
				if i == 0 {
					s.Forget(fx.pid)
				}
				s.Stats()
			}
		})
	}
	wg.Wait()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestObserveReportsMissedProcess checks that Observe tells a live
// process, whose mappings it read, from one gone before it was observed.
func TestObserveReportsMissedProcess(t *testing.T) {
	live, dead := startC(t), startC(t)
	dead.kill()
	waitGone(t, dead.pid)
	s := New(nil, Options{})
	if !s.Observe(live.pid, "test") {
		t.Error("Observe of a live process reports no mappings")
	}
	if s.Observe(dead.pid, "test") {
		t.Error("Observe of a process gone before it was observed reports mappings")
	}
}

// TestForgetExited checks that the processes that exited are forgotten
// once idle, and the live ones kept.
func TestForgetExited(t *testing.T) {
	live, dead := startC(t), startC(t)
	s := New(nil, Options{})
	s.Observe(live.pid, "test")
	s.Observe(dead.pid, "test")
	dead.kill()
	waitGone(t, dead.pid)
	if n := s.ForgetExited(time.Hour); n != 0 {
		t.Errorf("ForgetExited(1h) forgot %d processes used just now", n)
	}
	if n := s.ForgetExited(0); n != 1 {
		t.Errorf("ForgetExited(0) forgot %d processes, want 1", n)
	}
	if st := s.Stats(); st.Processes != 1 {
		t.Errorf("Processes = %d, want the live one", st.Processes)
	}
	s.Observe(live.pid, "test")
	if st := s.Stats(); st.MapsReads != 2 {
		t.Errorf("the live process was forgotten: %d maps reads, want 2", st.MapsReads)
	}
}

// TestBinaryCacheBytes checks the binary cache's memory bound: beyond
// MaxBinaryBytes the least recently used symbol tables are evicted, the one
// just loaded stays, and the process that uses them still resolves.
func TestBinaryCacheBytes(t *testing.T) {
	fx := startC(t)
	_, write := libcWrite(t, fx.pid)
	stack, _, _ := cChain(t, fx)
	load := func(s *Symbolizer) {
		t.Helper()
		if f := s.Symbolize(fx.pid, nil, stack[:1])[0]; f.Function != "hot_c_function" {
			t.Errorf("fixture: got %+v", f)
		}
		if f := s.Symbolize(fx.pid, nil, []uint64{write})[0]; !strings.Contains(f.Function, "write") {
			t.Errorf("libc: got %+v", f)
		}
	}
	unbounded := New(nil, Options{})
	load(unbounded)
	all := unbounded.Stats()
	if all.Binaries != 2 || all.BinaryBytes <= 0 {
		t.Fatalf("unbounded: %+v, want 2 binaries and their bytes", all)
	}

	s := New(nil, Options{MaxBinaryBytes: 1})
	load(s)
	st := s.Stats()
	if st.Binaries != 1 || st.BinaryBytes <= 0 || st.BinaryBytes >= all.BinaryBytes {
		t.Errorf("bounded to 1 byte: %+v, want the last binary only (both take %d bytes)", st, all.BinaryBytes)
	}
	load(s) // the process keeps the binaries it loaded
	if got := s.Stats(); got.BinaryMisses != 2 {
		t.Errorf("BinaryMisses = %d, want 2: the process keeps its binaries", got.BinaryMisses)
	}
}

// TestExecSeenByCommandName checks that a process whose maps were read
// before its exec (the child of a vfork, sampled in its parent's image) is
// symbolized in its new image from its first sample under its new command
// name, not a mapsRefreshInterval later.
func TestExecSeenByCommandName(t *testing.T) {
	libs := realLibs(t, 2)
	if len(libs) < 2 {
		t.Skipf("%d shared libraries with code in /usr/lib/x86_64-linux-gnu, want 2", len(libs))
	}
	parent, child := &libs[0], &libs[1]
	root := t.TempDir()
	const pid = 4242
	maps := filepath.Join(root, "4242", "maps")
	if err := os.Mkdir(filepath.Dir(maps), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, maps, parent.mapsLine()) // the vfork child shares its parent's mm
	s := New(nil, Options{ProcRoot: root})
	if !s.Observe(pid, "parent") {
		t.Fatal("the process is not tracked after Observe")
	}
	writeFile(t, maps, child.mapsLine()) // it exec'd
	if f := s.Symbolize(pid, nil, []uint64{child.pc0})[0]; f.Module != moduleUnknown {
		t.Fatalf("under the same command name, within %v of the read: %+v, want [unknown]: the test shows nothing", mapsRefreshInterval, f)
	}
	s.Has(pid, "child")
	f := s.Symbolize(pid, nil, []uint64{child.pc0})[0]
	if f.Module != child.path || f.Kind != sample.KindUser {
		t.Fatalf("after the command name changed: %+v, want a frame in %s", f, child.path)
	}
	if st := s.Stats(); st.MapsReads != 2 {
		t.Errorf("%d reads of the maps, want 2 (one before the exec, one after)", st.MapsReads)
	}
	// Another sample under the new name reads nothing more.
	s.Has(pid, "child")
	s.Symbolize(pid, nil, []uint64{parent.pc0})
	if st := s.Stats(); st.MapsReads != 2 {
		t.Errorf("%d reads of the maps after a second sample, want still 2", st.MapsReads)
	}
}

// TestFrameCache symbolizes stacks the stack cache does not hold, of
// frames already named (the leaf moved; an address seen as a leaf now a
// return address, looked up a byte before): each frame as a symbolizer
// that never saw them names it.
func TestFrameCache(t *testing.T) {
	fx := startC(t)
	s := New(nil, Options{})
	s.Observe(fx.pid, "test")
	stack, _, _ := cChain(t, fx)
	first := s.Symbolize(fx.pid, nil, stack)
	moved := slices.Clone(stack)
	moved[0]++
	swapped := []uint64{stack[1], stack[0], stack[2], stack[3]}
	for _, st := range [][]uint64{moved, swapped} {
		got := s.Symbolize(fx.pid, nil, st)
		fresh := New(nil, Options{})
		fresh.Observe(fx.pid, "test")
		if want := fresh.Symbolize(fx.pid, nil, st); !slices.Equal(got, want) {
			t.Errorf("stack %#x named\n%v,\nwant %v", st, got, want)
		}
	}
	if got := s.Symbolize(fx.pid, nil, moved); !slices.Equal(got[1:], first[1:]) || got[0].Function != first[0].Function || got[0].Address != first[0].Address+1 {
		t.Errorf("the moved leaf's stack named %v, want %v with the leaf a byte on", got, first)
	}
	if swapped := s.Symbolize(fx.pid, nil, swapped); swapped[1] == first[0] {
		t.Errorf("hot_c_function's first byte as a return address named %v, as the leaf was", swapped[1])
	}
}
