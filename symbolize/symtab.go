package symbolize

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
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
type symtab struct {
	syms  []symbol
	names string
}

// candidate is a symbol before it enters a symtab.
type candidate struct {
	addr uint64
	// size 0 means unknown: the symbol then reaches the next symbol.
	size uint64
	name string
	// rank decides between symbols at the same address: the highest
	// rank wins, then the one added first.
	rank int
	// module is carried through for the kernel's module names.
	module string
}

// buildSymtab sorts the candidates by address, keeps one per address, gives
// unsized symbols the distance to the next one, and packs the result. It
// also returns the indexes in cands of the kept candidates, in table order.
func buildSymtab(cands []candidate) (symtab, []int32) {
	// Sorting indexes rather than the candidates moves 4 bytes instead of
	// a struct holding pointers; the index also breaks ties.
	order := make([]int32, len(cands))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := &cands[i], &cands[j]
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		if c := cmp.Compare(b.rank, a.rank); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	kept := order[:0]
	for _, i := range order {
		if len(kept) > 0 && cands[kept[len(kept)-1]].addr == cands[i].addr {
			continue
		}
		kept = append(kept, i)
	}

	var names strings.Builder
	for _, i := range kept {
		names.WriteString(cands[i].name)
	}
	t := symtab{syms: make([]symbol, len(kept)), names: names.String()}
	end := 0
	for k, i := range kept {
		c := &cands[i]
		size := c.size
		if size == 0 && k+1 < len(kept) {
			size = cands[kept[k+1]].addr - c.addr
		}
		end += len(c.name)
		t.syms[k] = symbol{addr: c.addr, size: uint32(min(size, math.MaxUint32)), nameEnd: uint32(end)}
	}
	return t, kept
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

// name returns the name of the i-th symbol.
func (t *symtab) name(i int) string {
	start := uint32(0)
	if i > 0 {
		start = t.syms[i-1].nameEnd
	}
	return t.names[start:t.syms[i].nameEnd]
}

// len returns the number of symbols.
func (t *symtab) len() int { return len(t.syms) }
