package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/sample"
)

func TestLoadKernel(t *testing.T) {
	k, err := LoadKernel("testdata/kallsyms/basic")
	if err != nil {
		t.Fatal(err)
	}
	// 13 text lines; _stext shares _text's address and wins, listed
	// last, as does strong_fn over weak_fn, and the padding symbols
	// __pfx_ and __cfi_ are left out.
	if k.Len() != 9 {
		t.Errorf("Len() = %d, want 9", k.Len())
	}
	for _, tc := range []struct {
		addr         uint64
		name, module string
	}{
		{0xffffffff81000000, "_stext", sample.KernelModule},
		{0xffffffff81000011, "entry_SYSCALL_64", sample.KernelModule},
		{0xffffffff81000ff4, "entry_SYSCALL_64", sample.KernelModule}, // in do_syscall_64's padding
		{0xffffffff81001000, "do_syscall_64", sample.KernelModule},
		{0xffffffff810010ff, "do_syscall_64", sample.KernelModule},
		{0xffffffff81001100, "helper_local", sample.KernelModule},
		{0xffffffff81001250, "strong_fn", sample.KernelModule},
		// Data symbols are not text: the address stays with the text
		// symbol below it.
		{0xffffffff81002004, "strong_fn", sample.KernelModule},
		{0xffffffffc0200000, "mod_func_a", "[mymod]"},
		{0xffffffffc0200fff, "mod_func_b", "[mymod]"},
		{0xffffffffc0201008, "other_mod_fn", "[othermod]"},
		{0xffffffffc0300040, "bpf_prog_0123456789abcdef_handler", "[bpf]"},
	} {
		want := sample.Frame{Function: tc.name, Module: tc.module, Address: tc.addr, Kind: sample.KindKernel}
		if got := k.Resolve(tc.addr); got != want {
			t.Errorf("Resolve(%#x) = %+v, want %+v", tc.addr, got, want)
		}
	}
	want := sample.Frame{Function: "[kernel.kallsyms+0xffffffff80000000]", Module: sample.KernelModule,
		Address: 0xffffffff80000000, Kind: sample.KindKernel}
	if got := k.Resolve(0xffffffff80000000); got != want {
		t.Errorf("below the first symbol: got %+v, want %+v", got, want)
	}
}

func TestLoadKernelHidden(t *testing.T) {
	_, err := LoadKernel("testdata/kallsyms/hidden")
	if !errors.Is(err, ErrAddressesHidden) {
		t.Fatalf("got %v, want ErrAddressesHidden", err)
	}
	for _, s := range []string{"CAP_SYSLOG", "kernel.kptr_restrict", "testdata/kallsyms/hidden"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
}

func TestParseKallsymsErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"ffffffff81000000 D data_only\n",
		"ffffffff81000000 T\n",
		"zzzz T bad_address\n",
		"ffffffff81000000 TT two_letter_type\n",
		"0xffffffff81000000 T prefixed_address\n",
		"1ffffffff81000000f T address_overflow\n",
		"-ffffffff81000000 T negative\n",
	} {
		if _, err := parseKallsyms(strings.NewReader(in)); err == nil {
			t.Errorf("parseKallsyms(%q) succeeded", in)
		}
	}
	if _, err := LoadKernel("testdata/kallsyms/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
}

// TestLoadKernelAliases checks that of the symbols at one address the last
// one listed is kept, as perf does: perf report shows
// __x86_indirect_thunk_rax and __x64_sys_getpid (checked with perf 6.1 on
// Linux 6.18), not __pi___x86_indirect_thunk_rax, which its rule would pick
// by the length of the name alone, nor __ia32_sys_getpid, listed first.
func TestLoadKernelAliases(t *testing.T) {
	k, err := LoadKernel("testdata/kallsyms/aliases")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr         uint64
		name, module string
	}{
		{0xffffffff81000000, "__pi__text", sample.KernelModule},
		{0xffffffff81379cc4, "__x64_sys_getpid", sample.KernelModule},
		{0xffffffff81379d00, "__do_sys_gettid", sample.KernelModule},
		{0xffffffff81d5aa90, "cpu_show_ghostwrite", sample.KernelModule},
		{0xffffffff821f64a0, "__pi_memcpy", sample.KernelModule},
		{0xffffffff82204bc6, "__x86_indirect_thunk_rax", sample.KernelModule},
		{0xffffffff82204be0, "__x86_indirect_thunk_rcx", sample.KernelModule},
		// Listed after the BPF program, sorted before it.
		{0xffffffffc0201000, "ftrace_trampoline_alias", "[__builtin__ftrace]"},
		{0xffffffffc0a35000, "bpf_prog_6deef7357e7b4530_sd_fw_egress", "[bpf]"},
	} {
		want := sample.Frame{Function: tc.name, Module: tc.module, Address: tc.addr, Kind: sample.KindKernel}
		if got := k.Resolve(tc.addr); got != want {
			t.Errorf("Resolve(%#x) = %+v, want %+v", tc.addr, got, want)
		}
	}
	if k.Len() != 10 {
		t.Errorf("Len() = %d, want 10 (one per address)", k.Len())
	}
}

// TestRealKallsyms resolves the running kernel's symbols: do_syscall_64,
// the aliases perf was seen to show, and every symbol kept, compared with
// a plain reading of the file.
func TestRealKallsyms(t *testing.T) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Skipf("no kernel symbols: %v", err)
	}
	k, err := parseKallsyms(bytes.NewReader(data))
	if errors.Is(err, ErrAddressesHidden) {
		t.Skipf("this process cannot read kernel addresses: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	addr := kallsymsAddr(t, "do_syscall_64")
	for _, a := range []uint64{addr, addr + 1} {
		if f := k.Resolve(a); f.Function != "do_syscall_64" || f.Module != sample.KernelModule {
			t.Errorf("Resolve(%#x) = %+v, want do_syscall_64", a, f)
		}
	}
	if k.Len() < 1000 {
		t.Errorf("only %d kernel text symbols", k.Len())
	}
	want, err := referenceKallsyms(data)
	if err != nil {
		t.Fatal(err)
	}
	checkKernel(t, k, want)
	for _, name := range []string{"__x86_indirect_thunk_rax", "__x64_sys_getpid"} {
		for addr, s := range want {
			if s.name == name {
				if got := k.Resolve(addr).Function; got != name {
					t.Errorf("Resolve(%#x) = %s, perf shows %s", addr, got, name)
				}
			}
		}
	}
}

// kallsymsAddr finds a kernel symbol's address by reading /proc/kallsyms.
func kallsymsAddr(t testing.TB, name string) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[2] == name {
			addr, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return addr
		}
	}
	t.Skipf("this kernel has no %s", name)
	return 0
}

// kernelSymbol is a symbol as referenceKallsyms reads it.
type kernelSymbol struct{ name, module string }

// referenceKallsyms reads kallsyms text symbols the simple way, with
// strings and strconv: for every address, the last text symbol listed
// there (but the padding symbols).
func referenceKallsyms(data []byte) (map[uint64]kernelSymbol, error) {
	syms := make(map[uint64]kernelSymbol)
	blank := func(r rune) bool { return strings.ContainsRune(" \t\r\v\f", r) }
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.FieldsFunc(sc.Text(), blank)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 || len(f[1]) != 1 {
			return nil, fmt.Errorf("bad line %q", sc.Text())
		}
		if !strings.Contains("tTwW", f[1]) || strings.HasPrefix(f[2], "__pfx_") || strings.HasPrefix(f[2], "__cfi_") {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, err
		}
		if addr == 0 {
			continue
		}
		module := sample.KernelModule
		if len(f) > 3 {
			module = f[3]
		}
		syms[addr] = kernelSymbol{f[2], module}
	}
	if len(syms) == 0 {
		return nil, errors.New("no text symbols")
	}
	return syms, sc.Err()
}

// checkKernel checks that k holds the symbols of want, and only those.
func checkKernel(t *testing.T, k *Kernel, want map[uint64]kernelSymbol) {
	t.Helper()
	if k.Len() != len(want) {
		t.Errorf("Len() = %d, want %d", k.Len(), len(want))
	}
	for i, s := range k.tab.syms {
		if i > 0 && s.addr <= k.tab.syms[i-1].addr {
			t.Fatalf("symbol %d at %#x is not above the one before", i, s.addr)
		}
		w, ok := want[s.addr]
		f := k.Resolve(s.addr)
		if !ok || f.Function != w.name || f.Module != w.module || f.Kind != sample.KindKernel {
			t.Fatalf("Resolve(%#x) = %+v, want %+v (listed: %v)", s.addr, f, w, ok)
		}
	}
}

// FuzzKallsyms compares parseKallsyms with referenceKallsyms.
func FuzzKallsyms(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseKallsyms(bytes.NewReader(data))
		want, refErr := referenceKallsyms(data)
		if (err == nil) != (refErr == nil) && !errors.Is(err, ErrAddressesHidden) {
			t.Fatalf("parseKallsyms: %v, reference: %v", err, refErr)
		}
		if err != nil {
			return
		}
		checkKernel(t, k, want)
	})
}

// TestUnknownName checks unknownName against sample.UnknownName, whose
// format it reproduces.
func TestUnknownName(t *testing.T) {
	for _, tc := range []struct {
		module, base string
		offset       uint64
	}{
		{sample.KernelModule, "kernel.kallsyms", 0xffffffff81000000},
		{"/usr/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6", 0x2724a},
		{"[vdso]", "vdso", 0},
		{"/opt/my app/" + strings.Repeat("long name ", 10), strings.Repeat("long name ", 10), math.MaxUint64},
		{"/trailing/", "/trailing/", 0x10},
	} {
		if got, want := unknownName(tc.module, tc.offset), sample.UnknownName(tc.base, tc.offset); got != want {
			t.Errorf("unknownName(%q, %#x) = %q, want %q", tc.module, tc.offset, got, want)
		}
	}
}
