package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/heatscope/heatscope/sample"
)

// ErrAddressesHidden is wrapped by LoadKernel's error when every address in
// the symbol file is zero, which is how the kernel hides them from readers
// without CAP_SYSLOG or when kernel.kptr_restrict is 2.
var ErrAddressesHidden = errors.New("kernel symbol addresses are all zero: reading them needs CAP_SYSLOG " +
	"and the sysctl kernel.kptr_restrict at 0 or 1")

// Kernel resolves kernel addresses with the text symbols of /proc/kallsyms:
// the kernel image's and those of loaded modules (and BPF programs, which
// the kernel lists as the module "bpf"). It is immutable and safe for
// concurrent use. A nil *Kernel resolves every address to an unknown frame.
//
// kallsyms has no symbol sizes: an address belongs to the closest symbol
// at or below it. Padding symbols ("__pfx_", "__cfi_") are left out.
type Kernel struct {
	tab symtab
	// modules says which module each run of symbols belongs to, sorted by
	// first; the kernel image's runs have module sample.KernelModule.
	modules []moduleRun
}

// moduleRun marks that the symbols from index first on belong to module,
// up to the next run.
type moduleRun struct {
	first  int
	module string
}

// LoadKernel reads a kallsyms file, normally "/proc/kallsyms". It fails
// with an error wrapping ErrAddressesHidden when the kernel shows every
// address as zero.
func LoadKernel(path string) (*Kernel, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load kernel symbols: %w", err)
	}
	defer f.Close()
	k, err := parseKallsyms(f)
	if err != nil {
		return nil, fmt.Errorf("load kernel symbols from %s: %w", path, err)
	}
	return k, nil
}

// parseKallsyms parses lines of the form "ADDR TYPE NAME [\t[MODULE]]",
// keeping the text symbols (types t, T, w and W) but for the "__pfx_" and
// "__cfi_" ones: they mark the padding and the CFI preamble in front of
// functions (about half the symbols of a kernel built with call padding),
// never run, and an address there belongs to the function before.
func parseKallsyms(r io.Reader) (*Kernel, error) {
	var (
		cands  []candidate
		zeroes int
		line   int
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line++
		fields := bytes.Fields(sc.Bytes())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 || len(fields[1]) != 1 {
			return nil, fmt.Errorf("line %d: want \"address type name [module]\", got %q", line, sc.Bytes())
		}
		rank := 0
		switch fields[1][0] {
		case 'T', 't':
			rank = 2
		case 'W', 'w':
			rank = 1
		default:
			continue
		}
		if bytes.HasPrefix(fields[2], []byte("__pfx_")) || bytes.HasPrefix(fields[2], []byte("__cfi_")) {
			continue
		}
		addr, err := strconv.ParseUint(string(fields[0]), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: address: %w", line, err)
		}
		if addr == 0 {
			zeroes++
			continue
		}
		module := sample.KernelModule
		if len(fields) > 3 {
			module = string(fields[3])
		}
		cands = append(cands, candidate{addr: addr, name: string(fields[2]), rank: rank, module: module})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(cands) == 0 {
		if zeroes > 0 {
			return nil, fmt.Errorf("%d text symbols: %w", zeroes, ErrAddressesHidden)
		}
		return nil, errors.New("no text symbols")
	}

	tab, kept := buildSymtab(cands)
	k := &Kernel{tab: tab}
	for i, c := range kept {
		if module := cands[c].module; len(k.modules) == 0 || k.modules[len(k.modules)-1].module != module {
			k.modules = append(k.modules, moduleRun{first: i, module: module})
		}
	}
	return k, nil
}

// Resolve returns the kernel frame of addr: the symbol containing it, or
// "[kernel.kallsyms+0xADDR]" (the absolute address) when none does.
func (k *Kernel) Resolve(addr uint64) sample.Frame {
	f, _ := k.resolve(addr, addr)
	return f
}

// resolve returns the frame of addr, looking up lookup (addr-1 for return
// addresses), and whether it was named.
func (k *Kernel) resolve(addr, lookup uint64) (sample.Frame, bool) {
	f := sample.Frame{Module: sample.KernelModule, Address: addr, Kind: sample.KindKernel}
	i, ok := 0, false
	if k != nil {
		i, ok = k.tab.lookup(lookup)
	}
	if !ok {
		f.Function = unknownName(f.Module, addr)
		return f, false
	}
	run := sort.Search(len(k.modules), func(j int) bool { return k.modules[j].first > i }) - 1
	f.Module = k.modules[run].module
	f.Function = k.tab.name(i)
	return f, true
}

// Len returns the number of text symbols kept (one per address).
func (k *Kernel) Len() int { return k.tab.len() }

// unknownName names an unresolved address of a module written "[name]" or
// as a path: "[name+0xoffset]" with the module's base name.
func unknownName(module string, offset uint64) string {
	if strings.HasPrefix(module, "[") && strings.HasSuffix(module, "]") {
		module = module[1 : len(module)-1]
	} else if i := strings.LastIndexByte(module, '/'); i >= 0 && i+1 < len(module) {
		module = module[i+1:]
	}
	return sample.UnknownName(module, offset)
}
