package symbolize

import (
	"cmp"
	"debug/elf"
	"math"
	"slices"
	"sort"
	"strings"
	"unsafe"
)

// symbol is one entry of a symtab: 16 bytes, with the name kept in the
// table's single string.
type symbol struct {
	addr uint64
	// size is the byte length of the symbol; 0 means "up to the end of
	// the address space" and only occurs on the last entry.
	size uint32
	// nameEnd is where the name ends in symtab.names; it starts where the
	// previous entry's name ends.
	nameEnd uint32
}

// symtab is a compact, immutable table of address ranges and their names,
// sorted by address, looked up by binary search. ELF binaries, the kernel
// and perf maps all store their symbols this way.
//
// The names of an ELF binary's table are front-coded: neighbours in
// address order share long prefixes (a Go package path, a C++ namespace),
// so every name but the first of each run of prefixRun keeps only a byte
// saying how many leading bytes it shares with the name before it, then
// the rest. MinIO's 117 000 function names take 2.4 MB instead of 8.2, its
// whole table 4.2 MB instead of 10.1, which fits the default 8 MiB symbol
// cache: whole, it evicted every other binary and was evicted by the next
// one loaded, and so was loaded again and again.
type symtab struct {
	syms  []symbol
	names string
	// prefixed says the names are front-coded.
	prefixed bool
}

// prefixRun is how many names of a front-coded table follow each other
// from one stored whole: the most that name decodes for one name.
const prefixRun = 16

// candidate is a symbol before it enters a symtab.
type candidate struct {
	addr uint64
	// size 0 means unknown: the symbol then reaches the next symbol.
	size uint64
	name string
	// rank decides first between symbols at the same address: the
	// highest wins (a .gopclntab function over ELF symbols, a later perf
	// map line over an earlier one). Between equal ranks, perf's rule
	// decides (see alias.beats), then the symbol added first.
	rank int
	// bind is the ELF binding (local for symbols that have none).
	bind elf.SymBind
}

// Ranks of ELF symbols and of Go functions from .gopclntab.
const (
	rankELF = iota
	rankGo
)

// alias is what perf looks at to choose between symbols at one address.
type alias struct {
	name string
	// sized is whether the symbol has a size as perf sees it: an ELF
	// symbol without one is given the distance to the next symbol, which
	// is 0 when an alias follows it at the same address.
	sized bool
	bind  elf.SymBind
}

// beats reports whether perf prefers b to a, a symbol at the same address
// listed before it, as choose_best_symbol (tools/perf/util/symbol.c) does:
// a sized symbol over an unsized one, then non-weak over weak, then global
// over non-global, then fewer leading underscores, then the longer name.
// On a tie the symbol listed first stays, so that folding a run of
// aliases with beats, first to last, keeps the one perf keeps.
func (b alias) beats(a alias) bool {
	if a.sized != b.sized {
		return b.sized
	}
	if aWeak, bWeak := a.bind == elf.STB_WEAK, b.bind == elf.STB_WEAK; aWeak != bWeak {
		return aWeak
	}
	if aGlobal, bGlobal := a.bind == elf.STB_GLOBAL, b.bind == elf.STB_GLOBAL; aGlobal != bGlobal {
		return bGlobal
	}
	if ua, ub := leadingUnderscores(a.name), leadingUnderscores(b.name); ua != ub {
		return ub < ua
	}
	return len(b.name) > len(a.name)
}

// leadingUnderscores counts the underscores s starts with.
// leadingUnderscores counts the underscores s starts with.
func leadingUnderscores(s string) int { return len(s) - len(strings.TrimLeft(s, "_")) }

// buildSymtab sorts the candidates by address, keeps one per address (the
// highest rank, then the one perf would show), gives unsized symbols the
// distance to the next one, and packs the result, its names front-coded
// if frontCode is set. A table whose owner does not keep the names it
// hands out (a perf map) is better plain: name then returns a slice of
// the table, with no decoding and no allocation.
func buildSymtab(cands []candidate, trim *pageTrim, frontCode bool) symtab {
	// Sorting addresses and indexes rather than the candidates moves 16
	// bytes instead of a struct holding pointers, and compares without
	// following the index; the index keeps the order of aliases.
	type key struct {
		addr uint64
		i    int32
	}
	order := make([]key, len(cands))
	for i := range order {
		order[i] = key{cands[i].addr, int32(i)}
	}
	slices.SortFunc(order, func(a, b key) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	kept := make([]int32, 0, len(order))
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && order[end].addr == order[start].addr {
			end++
		}
		best := start
		for k := start + 1; k < end; k++ {
			if cands[order[k].i].beats(&cands[order[best].i], k == end-1) {
				best = k
			}
		}
		kept = append(kept, order[best].i)
		start = end
	}

	// The coded names' length first, to allocate them once, and how many
	// bytes each shares with the one before.
	total := 0
	shared := make([]uint8, len(kept))
	for k, i := range kept {
		name := cands[i].name
		trim.touchString(name)
		if frontCode && k%prefixRun != 0 {
			shared[k] = sharedPrefix(cands[kept[k-1]].name, name)
			total++
		}
		total += len(name) - int(shared[k])
	}
	names := make([]byte, 0, total)
	t := symtab{syms: make([]symbol, len(kept)), prefixed: frontCode}
	for k, i := range kept {
		c := &cands[i]
		next, last := uint64(0), k+1 == len(kept)
		if !last {
			next = cands[kept[k+1]].addr
		}
		if frontCode && k%prefixRun != 0 {
			names = append(names, shared[k])
		}
		names = append(names, c.name[shared[k]:]...)
		trim.touchString(c.name)
		t.syms[k] = symbol{addr: c.addr, size: symbolSize(c.addr, c.size, next, last), nameEnd: uint32(len(names))}
	}
	t.names = unsafe.String(unsafe.SliceData(names), len(names))
	return t
}

// sharedPrefix returns how many leading bytes, at most 255, name shares
// with prev.
func sharedPrefix(prev, name string) uint8 {
	n := 0
	for n < min(len(prev), len(name), math.MaxUint8) && prev[n] == name[n] {
		n++
	}
	return uint8(n)
}

// beats reports whether c is kept rather than a, listed before it at the
// same address; last says whether c is the last listed there, which gives
// an unsized symbol a size in perf's eyes (a, followed by c, is not).
func (c *candidate) beats(a *candidate, last bool) bool {
	if c.rank != a.rank {
		return c.rank > a.rank
	}
	return alias{c.name, c.size != 0 || last, c.bind}.beats(alias{a.name, a.size != 0, a.bind})
}

// symbolSize returns the size to store for a symbol at addr: its own, or
// when it has none the distance to next, the following symbol's address,
// unless it is the last symbol, which is left open-ended (0). Sizes are
// clamped to 4 GiB.
func symbolSize(addr, size, next uint64, last bool) uint32 {
	if size == 0 && !last {
		size = next - addr
	}
	return uint32(min(size, math.MaxUint32))
}

// lookup returns the index of the symbol containing addr: the last one
// starting at or below addr, if addr is within its size.
func (t *symtab) lookup(addr uint64) (int, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > addr }) - 1
	if i < 0 {
		return 0, false
	}
	s := t.syms[i]
	if s.size != 0 && addr-s.addr >= uint64(s.size) {
		return 0, false
	}
	return i, true
}

// name returns the name of the i-th symbol: a slice of the table's names,
// or for a front-coded table a string of its own.
func (t *symtab) name(i int) string {
	if !t.prefixed {
		return t.stored(i)
	}
	first := i - i%prefixRun
	name := []byte(t.stored(first))
	for j := first + 1; j <= i; j++ {
		coded := t.stored(j)
		if coded == "" { // not written by buildSymtab
			return ""
		}
		name = append(name[:min(int(coded[0]), len(name))], coded[1:]...)
	}
	return string(name)
}

// stored returns the bytes the table stores for the i-th name.
func (t *symtab) stored(i int) string {
	start := uint32(0)
	if i > 0 {
		start = t.syms[i-1].nameEnd
	}
	return t.names[start:t.syms[i].nameEnd]
}

// len returns the number of symbols.
func (t *symtab) len() int { return len(t.syms) }
