package symbolize

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/heatscope/heatscope/sample"
)

// ErrAddressesHidden is wrapped by LoadKernel's error when every address in
// the symbol file is zero, which is how the kernel hides them from readers
// without CAP_SYSLOG or when kernel.kptr_restrict is 2.
var ErrAddressesHidden = errors.New("kernel symbol addresses are all zero: reading them needs CAP_SYSLOG " +
	"and the sysctl kernel.kptr_restrict at 0 or 1")

// Kernel resolves kernel addresses with the text symbols of /proc/kallsyms:
// the kernel image's and those of loaded modules (and BPF programs, which
// the kernel lists as the module "bpf"). It is safe for concurrent use, and
// immutable but for the whole of kallsyms that a table read from a
// KernelCache loads when it first needs it. A nil *Kernel resolves every
// address to an unknown frame.
//
// kallsyms has no symbol sizes: an address belongs to the closest symbol
// at or below it. Padding symbols ("__pfx_", "__cfi_") are left out. Of
// the symbols at one address, the one perf shows is kept: the last listed.
type Kernel struct {
	tab symtab
	// modules says which module each run of symbols belongs to, sorted by
	// first; the kernel image's runs have module sample.KernelModule.
	modules []moduleRun

	// static and dynamic are set on a table read from a KernelCache:
	// addresses outside the static ranges (sorted) are resolved by
	// dynamic, the whole of kallsyms read when first needed.
	static  []addrRange
	dynamic *dynamicKernel

	// programs are the agent's own BPF programs (AddProgram), sorted by
	// address, copied on write.
	programs atomic.Pointer[[]programSymbol]
}

// programSymbol is a BPF program's function in kernel text, its extent
// known exactly from the kernel's own account of its JIT image.
type programSymbol struct {
	addr uint64
	size uint32
	name string
}

// BPFModule is the module kallsyms lists BPF programs under.
const BPFModule = "[bpf]"

// AddProgram names the kernel text [p.Addr, p.Addr+p.Size) p.Name in
// module BPFModule: a function of a BPF program the agent loaded itself (its
// exit snapshot program runs in the context of the tasks it snapshots, and
// shows in their kernel stacks), as kallsyms names it
// ("bpf_prog_<tag>_<name>"). Its frames are then named without reading
// kallsyms again, which a table read from a KernelCache would otherwise do
// (30-50 ms of CPU) the first time one is sampled, and named right by a
// table read before the program was loaded, which would give its addresses
// to the symbol below them. It is safe to call while others resolve.
func (k *Kernel) AddProgram(p ProgramSymbol) {
	addr, size, name := p.Addr, p.Size, p.Name
	if k == nil || size == 0 {
		return
	}
	for {
		old := k.programs.Load()
		var progs []programSymbol
		if old != nil {
			progs = slices.Clone(*old)
		}
		i, _ := slices.BinarySearchFunc(progs, addr, func(p programSymbol, a uint64) int { return cmp.Compare(p.addr, a) })
		progs = slices.Insert(progs, i, programSymbol{addr: addr, size: size, name: name})
		if k.programs.CompareAndSwap(old, &progs) {
			return
		}
	}
}

// program returns the agent's own BPF program function holding lookup.
func (k *Kernel) program(addr, lookup uint64) (sample.Frame, bool) {
	p := k.programs.Load()
	if p == nil {
		return sample.Frame{}, false
	}
	return programAt(*p, addr, lookup)
}

// programAt returns the function of progs (sorted by address) holding
// lookup.
func programAt(progs []programSymbol, addr, lookup uint64) (sample.Frame, bool) {
	i := sort.Search(len(progs), func(i int) bool { return progs[i].addr > lookup }) - 1
	if i < 0 || lookup-progs[i].addr >= uint64(progs[i].size) {
		return sample.Frame{}, false
	}
	return sample.Frame{Function: progs[i].name, Module: BPFModule, Address: addr, Kind: sample.KindKernel}, true
}

// ProgramSymbol is a BPF program's function in kernel text: where its JIT
// image lies and the name kallsyms gives it ("bpf_prog_<tag>_<name>").
type ProgramSymbol struct {
	Addr uint64
	Size uint32
	Name string
}

// ListPrograms gives a table read from a KernelCache a way to name the BPF
// programs loaded on the machine without reading kallsyms: list returns
// their functions, as the kernel accounts for them (the profiler's
// ListPrograms, a few system calls a program: under a millisecond for a
// handful, where a read of kallsyms costs 30-50 ms). An address outside
// the kernel image and the modules is looked up in the last list first,
// then, the first time it is seen, in a new list (at most every
// relistInterval), and only then in kallsyms, read if need be. Call it
// before the table is used.
func (k *Kernel) ListPrograms(list func() ([]ProgramSymbol, error)) {
	if k != nil && k.dynamic != nil {
		k.dynamic.list = list
	}
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

// kallsymsBufferSize is the read buffer of parseKallsyms: /proc/kallsyms
// is several MiB, and every read of it costs a system call.
const kallsymsBufferSize = 256 << 10

// ksym is a kallsyms text symbol while the file is parsed.
type ksym struct {
	addr uint64
	// name is names[nameStart:nameStart+nameLen] in parseKallsyms.
	nameStart, nameLen uint32
	// module indexes the module names; 0 is the kernel image.
	module uint32
}

// parseKallsyms parses lines of the form "ADDR TYPE NAME [\t[MODULE]]",
// keeping the text symbols (types t, T, w and W) but for the "__pfx_" and
// "__cfi_" ones: they mark the padding and the CFI preamble in front of
// functions (about half the symbols of a kernel built with call padding),
// never run, and an address there belongs to the function before.
//
// Of the symbols at one address, the last one listed is kept, as perf
// does: perf gives a kallsyms symbol the distance to the next one as its
// size, so that all aliases but the last have size 0, and a sized symbol
// beats the others whatever their type or name (see alias.beats).
//
// The file has some 100,000 lines: they are parsed in place, the names
// appended to one buffer and the module names interned, without an
// allocation per line.
func parseKallsyms(r io.Reader) (*Kernel, error) {
	var (
		syms      []ksym
		names     []byte
		modules   = []string{sample.KernelModule}
		moduleIDs = map[string]uint32{}
		zeroes    int
		line      int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, kallsymsBufferSize), kallsymsBufferSize)
	for sc.Scan() {
		line++
		addrField, rest := nextField(sc.Bytes())
		if len(addrField) == 0 {
			continue
		}
		typ, rest := nextField(rest)
		name, rest := nextField(rest)
		if len(name) == 0 || len(typ) != 1 {
			return nil, fmt.Errorf("line %d: want \"address type name [module]\", got %q", line, sc.Bytes())
		}
		switch typ[0] {
		case 'T', 't', 'W', 'w':
		default:
			continue
		}
		if hasPrefix(name, "__pfx_") || hasPrefix(name, "__cfi_") {
			continue
		}
		addr, ok := parseHexBytes(addrField)
		if !ok {
			return nil, fmt.Errorf("line %d: address %q is not a 64-bit hexadecimal number", line, addrField)
		}
		if addr == 0 {
			zeroes++
			continue
		}
		module := uint32(0)
		if field, _ := nextField(rest); len(field) > 0 {
			var known bool
			if module, known = moduleIDs[string(field)]; !known {
				module = uint32(len(modules))
				modules = append(modules, string(field))
				moduleIDs[modules[module]] = module
			}
		}
		// Doubling, where append grows large slices by a quarter,
		// halves the memory allocated and copied on the way.
		if len(syms) == cap(syms) {
			syms = slices.Grow(syms, max(len(syms), 1024))
		}
		if len(names)+len(name) > cap(names) {
			names = slices.Grow(names, max(len(names), len(name), 16<<10))
		}
		syms = append(syms, ksym{addr: addr, nameStart: uint32(len(names)), nameLen: uint32(len(name)), module: module})
		names = append(names, name...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(syms) == 0 {
		if zeroes > 0 {
			return nil, fmt.Errorf("%d text symbols: %w", zeroes, ErrAddressesHidden)
		}
		return nil, errors.New("no text symbols")
	}
	if uint64(len(names)) > math.MaxUint32 {
		return nil, fmt.Errorf("%d bytes of symbol names, more than a table holds", len(names))
	}

	// The kernel image's symbols are listed in address order, modules
	// and BPF programs after them; a stable sort keeps aliases in the
	// order listed.
	byAddr := func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) }
	if !slices.IsSortedFunc(syms, byAddr) {
		slices.SortStableFunc(syms, byAddr)
	}
	kept, total := syms[:0], 0 // overwrites only symbols already read
	for i, s := range syms {
		if i+1 < len(syms) && syms[i+1].addr == s.addr {
			continue // an alias listed later wins
		}
		kept = append(kept, s)
		total += int(s.nameLen)
	}

	var packed strings.Builder
	packed.Grow(total)
	k := &Kernel{tab: symtab{syms: make([]symbol, len(kept))}}
	for i, s := range kept {
		next, last := uint64(0), i+1 == len(kept)
		if !last {
			next = kept[i+1].addr
		}
		packed.Write(names[s.nameStart : s.nameStart+s.nameLen])
		k.tab.syms[i] = symbol{addr: s.addr, size: symbolSize(s.addr, 0, next, last), nameEnd: uint32(packed.Len())}
		if module := modules[s.module]; len(k.modules) == 0 || k.modules[len(k.modules)-1].module != module {
			k.modules = append(k.modules, moduleRun{first: i, module: module})
		}
	}
	k.tab.names = packed.String()
	return k, nil
}

// nextField returns the first field of b, delimited by ASCII white space,
// and what follows it.
func nextField(b []byte) (field, rest []byte) {
	start := 0
	for start < len(b) && blank[b[start]] {
		start++
	}
	end := start
	for end < len(b) && !blank[b[end]] {
		end++
	}
	return b[start:end], b[end:]
}

// blank marks the ASCII white space bytes, which separate fields.
var blank = [256]bool{' ': true, '\t': true, '\n': true, '\v': true, '\f': true, '\r': true}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// parseHexBytes parses a non-empty hexadecimal number that fits 64 bits,
// without a "0x" prefix, as strconv.ParseUint(string(b), 16, 64) does but
// without converting b to a string.
func parseHexBytes(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		d := hexDigits[c]
		if d == notHex || v>>60 != 0 { // not a digit, or the digit overflows
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// hexDigits holds the value of each hexadecimal digit, and notHex for the
// other bytes.
var hexDigits = func() (t [256]byte) {
	for i := range t {
		t[i] = notHex
	}
	for i := range byte(10) {
		t['0'+i] = i
	}
	for i := range byte(6) {
		t['a'+i], t['A'+i] = 10+i, 10+i
	}
	return t
}()

const notHex = 0xff

// Resolve returns the kernel frame of addr: the symbol containing it, or
// "[kernel.kallsyms+0xADDR]" (the absolute address) when none does.
func (k *Kernel) Resolve(addr uint64) sample.Frame {
	f, _ := k.resolve(addr, addr)
	return f
}

// resolve returns the frame of addr, looking up lookup (addr-1 for return
// addresses), and whether it was named.
func (k *Kernel) resolve(addr, lookup uint64) (sample.Frame, bool) {
	if k != nil && k.programs.Load() != nil {
		if f, ok := k.program(addr, lookup); ok {
			return f, true
		}
	}
	if k != nil && k.dynamic != nil && !k.inStatic(lookup) {
		return k.dynamic.resolve(addr, lookup)
	}
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
	// sample.UnknownName's format, without fmt: this runs for every
	// unresolved frame of every sample.
	var buf [64]byte
	b := append(append(append(buf[:0], '['), module...), "+0x"...)
	b = strconv.AppendUint(b, offset, 16)
	return string(append(b, ']'))
}
