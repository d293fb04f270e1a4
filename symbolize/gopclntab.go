package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unsafe"
)

// Magic numbers of the .gopclntab formats of Go 1.18 and of Go 1.20 and
// later, whose function entries are offsets from the start of the Go text.
// Older tables hold absolute addresses and are read with debug/gosym.
const (
	pclntabGo118 = 0xfffffff0
	pclntabGo120 = 0xfffffff1
)

// addGoFuncs adds the functions of a Go binary's .gopclntab, which
// stripped binaries (-ldflags=-s -w) keep because the runtime needs it,
// to cands, which holds the file's ELF function symbols, and returns the
// lot. Files without the section are left alone.
//
// The Go functions cover the Go text, each one up to the next: the ELF
// symbols there only name the same functions again (assembly ones with an
// ".abi0" suffix), and are dropped, which halves the symbols to sort.
//
// The result reuses cands when it can hold the ELF symbols left and the
// Go functions: a .symtab names every Go function, so there is room. The
// few function symbols of a stripped binary's .dynsym are added to the Go
// functions instead, which readGoFuncs leaves room for.
func addGoFuncs(cands []candidate, f *elf.File, trim *pageTrim) ([]candidate, error) {
	sec := f.Section(".gopclntab")
	if sec == nil {
		return cands, nil
	}
	var r io.ReaderAt = sec
	if data, ok := mappedSection(sec); ok {
		r = inMemory(data)
	}
	spare := len(cands)
	if f.Section(".symtab") != nil {
		spare = 0
	}
	goFuncs, offsets, err := readGoFuncs(r, sec.Size, f.ByteOrder, spare, trim)
	if err != nil {
		return cands, fmt.Errorf("read .gopclntab: %w", err)
	}
	if len(goFuncs) == 0 {
		return cands, nil
	}
	if offsets {
		text := goTextStart(f, cands, goFuncs)
		for i := range goFuncs {
			goFuncs[i].addr += text
		}
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, fn := range goFuncs {
		lo, hi = min(lo, fn.addr), max(hi, fn.addr+fn.size)
	}
	outside := cands[:0]
	for _, c := range cands {
		if c.addr < lo || c.addr >= hi {
			outside = append(outside, c)
		}
	}
	switch {
	case len(outside) == 0:
		return goFuncs, nil
	case cap(outside)-len(outside) >= len(goFuncs):
		// No Go function shares an address with these symbols: their
		// order does not matter.
		return append(outside, goFuncs...), nil
	}
	return append(goFuncs, outside...), nil
}

// readGoFuncs returns the functions of a .gopclntab of size bytes read
// from r, in a slice with room for spare more, and reports whether their
// addresses are offsets from the text start (Go 1.18+). Of a Go 1.18+
// table, only the function names are read whole; the function table and
// the functions' records are read through small windows, and the line and
// PC-value tables, most of the section, not at all. When r is inMemory,
// the names and tables are read in place, and the names point into it;
// trim counts what is read in place, and trims it.
func readGoFuncs(r io.ReaderAt, size uint64, order binary.ByteOrder, spare int, trim *pageTrim) ([]candidate, bool, error) {
	// The header: magic, 2 pad bytes, the minimum instruction size and
	// the pointer size, then 8 words (runtime.pcHeader).
	var head [8 + 8*8]byte
	n, err := r.ReadAt(head[:min(uint64(len(head)), size)], 0)
	if n < 8 {
		return nil, false, fmt.Errorf("header: %w", errors.Join(err, errors.New("truncated")))
	}
	if magic := order.Uint32(head[:]); magic != pclntabGo118 && magic != pclntabGo120 {
		cands, err := readOldGoFuncs(r, size)
		return cands, false, err
	}
	ptrSize := int(head[7])
	if ptrSize != 4 && ptrSize != 8 || n < 8+8*ptrSize {
		return nil, false, fmt.Errorf("header: pointer size %d in %d bytes", ptrSize, n)
	}
	word := func(i int) uint64 {
		if ptrSize == 4 {
			return uint64(order.Uint32(head[8+4*i:]))
		}
		return order.Uint64(head[8+8*i:])
	}
	// Words 3 to 7 are the offsets of the tables: function names, compile
	// units, files, PC-value tables and functions; a table ends where the
	// next one starts.
	nfunc, namesStart, funcsStart := word(0), word(3), word(7)
	namesEnd := size
	for i := 4; i <= 7; i++ {
		if w := word(i); w > namesStart && w < namesEnd {
			namesEnd = w
		}
	}
	if namesStart > namesEnd || funcsStart > size {
		return nil, false, fmt.Errorf("tables at %#x and %#x beyond the section's %#x bytes", namesStart, funcsStart, size)
	}
	// The function table is nfunc+1 pairs (entry offset, offset of the
	// function's record from the table); the last entry is the end of
	// the text. A record starts with the entry offset and the offset of
	// the name in the name table.
	funcsSize := size - funcsStart
	if nfunc >= funcsSize/8 {
		return nil, false, fmt.Errorf("%d functions in a table of %d bytes", nfunc, funcsSize)
	}
	funcTab := newWindow(r, funcsStart, funcsSize, order, trim)
	records := newWindow(r, funcsStart, funcsSize, order, trim)
	// Reading the end of both tables first checks that they are there
	// before allocating for them, in case the sizes are corrupt.
	if _, err := funcTab.uint32(8 * nfunc); err != nil {
		return nil, false, fmt.Errorf("function table: %w", err)
	}
	if namesEnd > namesStart {
		var last [1]byte
		if _, err := r.ReadAt(last[:], int64(namesEnd-1)); err != nil {
			return nil, false, fmt.Errorf("name table: %w", err)
		}
	}
	var nameTab []byte
	if mem, ok := r.(inMemory); ok && namesEnd <= uint64(len(mem)) {
		nameTab = mem[namesStart:namesEnd]
	} else {
		nameTab = make([]byte, namesEnd-namesStart)
		if _, err := r.ReadAt(nameTab, int64(namesStart)); err != nil {
			return nil, false, fmt.Errorf("name table: %w", err)
		}
	}
	// One string that all names share: the table in place, or its copy,
	// which nothing else holds.
	names := unsafe.String(unsafe.SliceData(nameTab), len(nameTab))
	cands := make([]candidate, 0, int(nfunc)+spare)
	end, err := funcTab.uint32(0)
	for i := uint64(0); i < nfunc && err == nil; i++ {
		var rec, nameOff uint32
		entry := end
		if rec, err = funcTab.uint32(8*i + 4); err != nil {
			break
		}
		if end, err = funcTab.uint32(8*i + 8); err != nil {
			break
		}
		if nameOff, err = records.uint32(uint64(rec) + 4); err != nil {
			break
		}
		nameEnd := -1
		if int(nameOff) < len(names) {
			nameEnd = strings.IndexByte(names[nameOff:], 0)
			trim.touch(unsafe.Pointer(unsafe.StringData(names[nameOff:])), nameEnd+1)
		}
		if nameEnd < 0 {
			return nil, false, fmt.Errorf("function %d: name at %#x not in the name table", i, nameOff)
		}
		if end > entry && nameEnd > 0 {
			cands = append(cands, candidate{addr: uint64(entry), size: uint64(end - entry),
				name: names[nameOff : int(nameOff)+nameEnd], rank: rankGo})
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("function table: %w", err)
	}
	return cands, true, nil
}

// window reads 4-byte words of a part of a section through a buffer that
// slides over it: words read in increasing order read that part once,
// without holding it all in memory. The buffer of a part of an inMemory
// section is the part itself.
type window struct {
	r     io.ReaderAt
	start uint64 // where the part starts in the section
	size  uint64 // its length
	order binary.ByteOrder
	buf   []byte
	// off is the offset in the part of buf's first byte.
	off uint64
	// trim counts the words read from buf, which may be the mapping.
	trim *pageTrim
}

// windowSize is the buffer size of a window.
const windowSize = 32 << 10

func newWindow(r io.ReaderAt, start, size uint64, order binary.ByteOrder, trim *pageTrim) *window {
	w := &window{r: r, start: start, size: size, order: order, trim: trim}
	if mem, ok := r.(inMemory); ok && start <= uint64(len(mem)) && size <= uint64(len(mem))-start {
		w.buf = mem[start : start+size]
	}
	return w
}

// uint32 returns the word at offset off of the part.
func (w *window) uint32(off uint64) (uint32, error) {
	if off > w.size || w.size-off < 4 {
		return 0, fmt.Errorf("offset %#x beyond the %#x bytes", off, w.size)
	}
	if off < w.off || off+4 > w.off+uint64(len(w.buf)) {
		if w.buf == nil {
			w.buf = make([]byte, windowSize)
		}
		n, err := w.r.ReadAt(w.buf[:min(windowSize, w.size-off)], int64(w.start+off))
		if n < 4 {
			return 0, fmt.Errorf("offset %#x: %w", off, errors.Join(err, io.ErrUnexpectedEOF))
		}
		w.buf, w.off = w.buf[:n], off
	}
	word := w.buf[off-w.off:]
	w.trim.touch(unsafe.Pointer(unsafe.SliceData(word)), 4)
	return w.order.Uint32(word), nil
}

// readOldGoFuncs returns the functions of a table older than Go 1.18,
// which holds absolute addresses, read with debug/gosym.
func readOldGoFuncs(r io.ReaderAt, size uint64) ([]candidate, error) {
	data, ok := r.(inMemory) // debug/gosym copies the names it returns
	if !ok {
		var err error
		if data, err = io.ReadAll(io.NewSectionReader(r, 0, int64(min(size, math.MaxInt64)))); err != nil {
			return nil, err
		}
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, 0))
	if err != nil {
		return nil, err
	}
	var cands []candidate
	for _, fn := range tab.Funcs {
		if fn.End > fn.Entry {
			cands = append(cands, candidate{addr: fn.Entry, size: fn.End - fn.Entry, name: fn.Name, rank: rankGo})
		}
	}
	return cands, nil
}

// goTextStart finds the address the .gopclntab offsets of goFuncs count
// from, with the ELF function symbols elfFuncs (from .symtab, else
// .dynsym):
//   - the runtime.text symbol, when .symtab is there;
//   - else a Go function that .dynsym exports (cgo binaries export
//     crosscall2 and _cgo_topofstack): its address minus its offset;
//   - else the .text section's address, which is where the Go linker puts
//     runtime.text when it links alone (external linkers put C start-up
//     code first, hence the anchors above).
func goTextStart(f *elf.File, elfFuncs, goFuncs []candidate) uint64 {
	for _, s := range elfFuncs {
		if s.name == "runtime.text" {
			return s.addr
		}
	}
	if len(elfFuncs) > 0 {
		exported := make(map[string]uint64, len(elfFuncs))
		for _, s := range elfFuncs {
			exported[s.name] = s.addr
		}
		for _, fn := range goFuncs {
			if addr, ok := exported[fn.name]; ok && addr >= fn.addr {
				return addr - fn.addr
			}
		}
	}
	if text := f.Section(".text"); text != nil {
		return text.Addr
	}
	return 0
}
