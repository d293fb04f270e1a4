package symbolize

import (
	"bufio"
	"bytes"
	"errors"
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
	// 13 text lines; _stext shares _text's address, weak_fn strong_fn's,
	// and the padding symbols __pfx_ and __cfi_ are left out.
	if k.Len() != 9 {
		t.Errorf("Len() = %d, want 9", k.Len())
	}
	for _, tc := range []struct {
		addr         uint64
		name, module string
	}{
		{0xffffffff81000000, "_text", sample.KernelModule},
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
	} {
		if _, err := parseKallsyms(strings.NewReader(in)); err == nil {
			t.Errorf("parseKallsyms(%q) succeeded", in)
		}
	}
	if _, err := LoadKernel("testdata/kallsyms/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
}

// TestRealKallsyms resolves the running kernel's do_syscall_64.
func TestRealKallsyms(t *testing.T) {
	k, err := LoadKernel("/proc/kallsyms")
	if errors.Is(err, ErrAddressesHidden) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
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

func FuzzKallsyms(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseKallsyms(bytes.NewReader(data))
		if err != nil {
			return
		}
		if k.Len() == 0 {
			t.Fatal("parsed without error but no symbols")
		}
		for i, s := range k.tab.syms {
			if i > 0 && s.addr <= k.tab.syms[i-1].addr {
				t.Fatalf("symbol %d at %#x is not above the one before", i, s.addr)
			}
			fr := k.Resolve(s.addr)
			if fr.Function != k.tab.name(i) || fr.Kind != sample.KindKernel || fr.Module == "" {
				t.Fatalf("Resolve(%#x) = %+v, want symbol %q", s.addr, fr, k.tab.name(i))
			}
		}
	})
}
