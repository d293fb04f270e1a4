package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/heatscope/heatscope/sample"
)

// testKernelCache returns a KernelCache over copies of the basic kallsyms,
// a boot id and a module list in a temporary directory.
func testKernelCache(t *testing.T) KernelCache {
	t.Helper()
	dir := t.TempDir()
	c := KernelCache{
		Dir:      filepath.Join(dir, "cache"),
		Kallsyms: filepath.Join(dir, "kallsyms"),
		BootID:   filepath.Join(dir, "boot_id"),
		Modules:  filepath.Join(dir, "modules"),
	}
	kallsyms, err := os.ReadFile("testdata/kallsyms/basic")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, c.Kallsyms, string(kallsyms))
	writeFile(t, c.BootID, "d6caff8c-4b75-4ad2-b86e-f272fca597b5\n")
	writeFile(t, c.Modules, "mymod 4096 0 - Live 0xffffffffc0200000\nothermod 8192 2 mymod, Live 0xffffffffc0201000\n")
	return c
}

// cacheTestAddrs are addresses of every kind in testdata/kallsyms/basic.
var cacheTestAddrs = []uint64{
	0xffffffff80000000, 0xffffffff81000000, 0xffffffff81000011, 0xffffffff81000ff4, 0xffffffff81001000,
	0xffffffff810010ff, 0xffffffff81001100, 0xffffffff81001250, 0xffffffff81002004, 0xffffffffc0200000,
	0xffffffffc0200fff, 0xffffffffc0201008, 0xffffffffc0300040,
}

func TestKernelCacheHitResolvesAsKallsyms(t *testing.T) {
	c := testKernelCache(t)
	want, err := LoadKernel(c.Kallsyms)
	if err != nil {
		t.Fatal(err)
	}
	if _, hit, err := c.Load(); err != nil || hit {
		t.Fatalf("first Load: hit %v, err %v; want a miss that fills the cache", hit, err)
	}
	info, err := os.Stat(filepath.Join(c.Dir, "kallsyms.cache"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("cache file mode %v, want 0600: it holds kernel addresses", perm)
	}
	got, hit, err := c.Load()
	if err != nil || !hit {
		t.Fatalf("second Load: hit %v, err %v; want a hit", hit, err)
	}
	if got.dynamic == nil || len(got.static) != 3 {
		t.Fatalf("cached table: dynamic %v, static ranges %v; want the whole file on demand and image + 2 modules", got.dynamic, got.static)
	}
	for _, addr := range cacheTestAddrs {
		if g, w := got.Resolve(addr), want.Resolve(addr); g != w {
			t.Errorf("cached Resolve(%#x) = %+v, kallsyms says %+v", addr, g, w)
		}
	}
}

func TestKernelCacheReadsDynamicSymbolsWhenNeeded(t *testing.T) {
	c := testKernelCache(t)
	if _, _, err := c.Load(); err != nil {
		t.Fatal(err)
	}
	// A BPF program loaded after the cache was written: its address is
	// outside the image and the modules, so the cached table must read
	// kallsyms again rather than name it after a neighbour.
	kallsyms, _ := os.ReadFile(c.Kallsyms)
	writeFile(t, c.Kallsyms, string(kallsyms)+"ffffffffc0400000 t bpf_prog_fedcba9876543210_new\t[bpf]\n")
	k, hit, err := c.Load()
	if err != nil || !hit {
		t.Fatalf("Load: hit %v, err %v; want a hit (BPF programs do not change the key)", hit, err)
	}
	if k.dynamic.kernel != nil {
		t.Fatal("kallsyms was read before any address needed it")
	}
	want := sample.Frame{Function: "mod_func_b", Module: "[mymod]", Address: 0xffffffffc0200120, Kind: sample.KindKernel}
	if got := k.Resolve(want.Address); got != want || k.dynamic.kernel != nil {
		t.Errorf("module address: %+v (kallsyms read: %v), want %+v from the cache", got, k.dynamic.kernel != nil, want)
	}
	want = sample.Frame{Function: "bpf_prog_fedcba9876543210_new", Module: "[bpf]", Address: 0xffffffffc0400010, Kind: sample.KindKernel}
	if got := k.Resolve(want.Address); got != want {
		t.Errorf("new BPF program: %+v, want %+v", got, want)
	}
}

func TestKernelCacheMisses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, c KernelCache)
	}{
		{"another boot", func(t *testing.T, c KernelCache) { writeFile(t, c.BootID, "0b3c1e0a-0000-4000-8000-000000000000\n") }},
		{"a module loaded", func(t *testing.T, c KernelCache) {
			m, _ := os.ReadFile(c.Modules)
			writeFile(t, c.Modules, string(m)+"newmod 4096 0 - Live 0xffffffffc0500000\n")
		}},
		{"addresses hidden since", func(t *testing.T, c KernelCache) {
			writeFile(t, c.Kallsyms, "0000000000000000 T _text\n0000000000000000 T do_syscall_64\n")
		}},
		{"a corrupt file", func(t *testing.T, c KernelCache) {
			path := filepath.Join(c.Dir, "kallsyms.cache")
			data, _ := os.ReadFile(path)
			data[len(data)/2] ^= 0xff
			writeFile(t, path, string(data))
		}},
		{"a truncated file", func(t *testing.T, c KernelCache) {
			path := filepath.Join(c.Dir, "kallsyms.cache")
			data, _ := os.ReadFile(path)
			writeFile(t, path, string(data[:len(data)-9]))
		}},
		{"a file others may write", func(t *testing.T, c KernelCache) {
			if err := os.Chmod(filepath.Join(c.Dir, "kallsyms.cache"), 0o666); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testKernelCache(t)
			if _, _, err := c.Load(); err != nil {
				t.Fatal(err)
			}
			tc.change(t, c)
			k, hit, err := c.Load()
			if hit {
				t.Fatal("Load used the cache")
			}
			if tc.name == "addresses hidden since" {
				if err == nil {
					t.Error("Load of a kallsyms with hidden addresses: no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := k.Resolve(0xffffffff81001000).Function; got != "do_syscall_64" {
				t.Errorf("Resolve after a miss: %q, want do_syscall_64", got)
			}
			if _, hit, _ := c.Load(); !hit {
				t.Error("the miss did not rewrite the cache")
			}
		})
	}
}

func TestKernelCacheWithoutModulesOrDir(t *testing.T) {
	c := testKernelCache(t)
	if err := os.Remove(c.Modules); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Load(); err != nil {
		t.Fatal(err)
	}
	k, hit, err := c.Load()
	if err != nil || !hit {
		t.Fatalf("kernel without modules: hit %v, err %v; want a hit", hit, err)
	}
	// Module addresses now come from the whole file.
	if got := k.Resolve(0xffffffffc0200000).Function; got != "mod_func_a" {
		t.Errorf("Resolve(module address) = %q, want mod_func_a", got)
	}
	c.Dir = ""
	if _, hit, err := c.Load(); err != nil || hit {
		t.Errorf("no cache directory: hit %v, err %v", hit, err)
	}
}

func FuzzDecodeKernelCache(f *testing.F) {
	k, err := LoadKernel("testdata/kallsyms/basic")
	if err != nil {
		f.Fatal(err)
	}
	var key [32]byte
	path := filepath.Join(f.TempDir(), "cache")
	if err := writeKernelCache(path, key, k); err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(kernelCacheMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := decodeKernelCache(data, key)
		if err != nil {
			return
		}
		for _, addr := range cacheTestAddrs {
			k.Resolve(addr) // must not panic
		}
	})
}

// TestOwnProgramNeedsNoKallsymsRead: under churn the agent's own exit
// snapshot program runs in the exiting tasks and shows in their kernel
// stacks. Named by AddProgram, its frames cost no read of kallsyms (a
// table from the cache read the whole file for the first of them, 30-50 ms
// of CPU), and a table read before the program was loaded names them
// after it, not after the symbol below them.
func TestOwnProgramNeedsNoKallsymsRead(t *testing.T) {
	c := testKernelCache(t)
	if _, _, err := c.Load(); err != nil {
		t.Fatal(err)
	}
	before, err := LoadKernel(c.Kallsyms) // read before the program was loaded
	if err != nil {
		t.Fatal(err)
	}
	kallsyms, _ := os.ReadFile(c.Kallsyms)
	const name = "bpf_prog_0123456789abcdef_on_exit"
	writeFile(t, c.Kallsyms, string(kallsyms)+"ffffffffc0500000 t "+name+"\t[bpf]\n")
	k, hit, err := c.Load()
	if err != nil || !hit {
		t.Fatalf("Load: hit %v, err %v; want a hit", hit, err)
	}
	for _, kernel := range []*Kernel{k, before} {
		kernel.AddProgram(ProgramSymbol{Addr: 0xffffffffc0500000, Size: 0x180, Name: name})
	}
	// Many samples in the program, as under churn: every exit runs it.
	wrong := 0
	for i := range 1000 {
		addr := 0xffffffffc0500000 + uint64(i%0x180)
		want := sample.Frame{Function: name, Module: BPFModule, Address: addr, Kind: sample.KindKernel}
		for _, kernel := range []*Kernel{k, before} {
			if got := kernel.Resolve(addr); got != want {
				if wrong++; wrong == 1 {
					t.Errorf("Resolve(%#x) = %+v, want %+v", addr, got, want)
				}
			}
		}
	}
	if k.dynamic.reads != 0 {
		t.Errorf("kallsyms read %d times for the agent's own program, want 0", k.dynamic.reads)
	}
	// Past the program's end it is not the program's.
	if got := before.Resolve(0xffffffffc0500180); got.Function == name {
		t.Errorf("Resolve past the program's end = %+v, want another symbol", got)
	}
}

// TestListedProgramsNeedNoKallsymsRead: BPF programs other than the
// agent's (other agents', a network plugin's) are loaded one after
// another and sampled as they run. Listed (Kernel.ListPrograms), each is
// named without a read of kallsyms, also one loaded after the last list,
// and so is one loaded after kallsyms was read, which kallsyms would have
// named after the program below it. Before, the first of them read
// kallsyms.
func TestListedProgramsNeedNoKallsymsRead(t *testing.T) {
	c := testKernelCache(t)
	if _, _, err := c.Load(); err != nil {
		t.Fatal(err)
	}
	kallsyms, _ := os.ReadFile(c.Kallsyms)
	writeFile(t, c.Kallsyms, string(kallsyms)+"ffffffffc0400000 t ftrace_trampoline\t[__builtin__ftrace]\n")
	k, hit, err := c.Load()
	if err != nil || !hit {
		t.Fatalf("Load: hit %v, err %v; want a hit", hit, err)
	}
	var loaded []ProgramSymbol
	lists := 0
	k.ListPrograms(func() ([]ProgramSymbol, error) { lists++; return slices.Clone(loaded), nil })
	program := func(i int) ProgramSymbol {
		return ProgramSymbol{Addr: 0xffffffffc0600000 + uint64(i)*0x1000, Size: 0x200, Name: fmt.Sprintf("bpf_prog_%016x_prog%d", i, i)}
	}
	check := func(p ProgramSymbol) {
		t.Helper()
		for off := range uint64(100) {
			addr := p.Addr + off*4
			want := sample.Frame{Function: p.Name, Module: BPFModule, Address: addr, Kind: sample.KindKernel}
			if got := k.Resolve(addr); got != want {
				t.Fatalf("Resolve(%#x) = %+v, want %+v", addr, got, want)
			}
		}
	}
	for i := range 10 {
		loaded = append(loaded, program(i))
		k.dynamic.listedAt = k.dynamic.listedAt.Add(-relistInterval) // the next list is due
		check(program(i))
	}
	if k.dynamic.reads != 0 || lists != 10 {
		t.Errorf("10 programs loaded and sampled: kallsyms read %d times, programs listed %d times; want 0 and 10", k.dynamic.reads, lists)
	}
	// An address no program holds (an ftrace trampoline) is listed for
	// once, then read from kallsyms, once.
	for range 3 {
		k.dynamic.listedAt = k.dynamic.listedAt.Add(-relistInterval)
		if got := k.Resolve(0xffffffffc0400010); got.Function != "ftrace_trampoline" {
			t.Fatalf("an address of kallsyms alone: %+v", got)
		}
	}
	if k.dynamic.reads != 1 || lists != 11 {
		t.Errorf("a trampoline sampled thrice: kallsyms read %d times, programs listed %d times; want 1 and 11", k.dynamic.reads, lists)
	}
	// A program loaded after kallsyms was read, which kallsyms would
	// give to the symbol below it.
	loaded = append(loaded, program(10))
	k.dynamic.listedAt = k.dynamic.listedAt.Add(-relistInterval)
	check(program(10))
	if k.dynamic.reads != 1 {
		t.Errorf("kallsyms read %d times, want 1 (for the trampoline)", k.dynamic.reads)
	}
}
