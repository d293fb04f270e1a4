package symbolize

import (
	"debug/elf"
	"errors"
	"os"
	"slices"
	"testing"
)

func TestDemangleName(t *testing.T) {
	for mangled, want := range map[string]string{
		"_ZN2ns6Widget6methodEi":                          "ns::Widget::method",
		"_ZNK6shapes6Circle4areaEd":                       "shapes::Circle::area",
		"_ZN6shapes5twiceIiEET_S1_":                       "shapes::twice<int>",
		"_ZN4core3fmt9Formatter3pad17h0123456789abcdefE":  "core::fmt::Formatter::pad",
		"_RNvNtCs1234_7mycrate6module8function":           "mycrate::module::function",
		"main":                                            "main",
		"_Znot_really_mangled":                            "_Znot_really_mangled",
		"_ZN9wikipedia7article6formatEv.cold":             "wikipedia::article::format",
		"_ZN3std2rt10lang_start17h5a7b7cd1e7e4a1b2E.llvm": "std::rt::lang_start",
	} {
		if got := demangleName(mangled); got != want {
			t.Errorf("demangleName(%q) = %q, want %q", mangled, got, want)
		}
	}
}

// TestLoadBinaryVaddr checks the file offset to virtual address
// translation on a binary whose segments do not start at offset 0.
func TestLoadBinaryVaddr(t *testing.T) {
	bin := buildC(t, "gcc", cSource, "fixture.c")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := loadBinary(f, "", "")
	if err != nil {
		t.Fatal(err)
	}
	sym := elfSymbol(t, bin, "hot_c_function")
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && sym.Value >= p.Vaddr && sym.Value < p.Vaddr+p.Filesz {
			if got := b.vaddr(sym.Value - p.Vaddr + p.Off); got != sym.Value {
				t.Errorf("vaddr of hot_c_function's file offset = %#x, want %#x", got, sym.Value)
			}
		}
	}
	if name, ok := b.lookup(sym.Value + sym.Size - 1); !ok || name != "hot_c_function" {
		t.Errorf("lookup(last byte of hot_c_function) = %q, %v", name, ok)
	}
}

// TestReadFuncSymbols compares readFuncSymbols with debug/elf's reading
// of the symbol tables of a Go binary, a C binary and libc, the 32-bit one
// too when it is installed.
func TestReadFuncSymbols(t *testing.T) {
	files := []string{buildGo(t, false), buildC(t, "gcc", cSource, "fixture.c")}
	for _, libc := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib32/libc.so.6"} {
		if _, err := os.Stat(libc); err == nil {
			files = append(files, libc)
		}
	}
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		funcs := 0
		for _, table := range []struct {
			typ  elf.SectionType
			read func() ([]elf.Symbol, error)
		}{{elf.SHT_SYMTAB, f.Symbols}, {elf.SHT_DYNSYM, f.DynamicSymbols}} {
			syms, err := table.read()
			if errors.Is(err, elf.ErrNoSymbols) {
				syms = nil
			} else if err != nil {
				t.Fatal(err)
			}
			var want []candidate
			for _, s := range syms {
				typ := elf.ST_TYPE(s.Info)
				if (typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC) && s.Section != elf.SHN_UNDEF && s.Value != 0 && s.Name != "" {
					want = append(want, candidate{addr: s.Value, size: s.Size, name: s.Name, bind: elf.ST_BIND(s.Info)})
				}
			}
			got, err := readFuncSymbols(f, table.typ, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: %d functions, debug/elf reads %d, or they differ", path, table.typ, len(got), len(want))
			}
			funcs += len(want)
		}
		if funcs == 0 {
			t.Errorf("%s: no function symbols to compare", path)
		}
	}
}
