package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/ianlancetaylor/demangle"
)

// binaryFile is the symbol table of one ELF file, shared by every process
// that maps it. It is immutable after loadBinary but for the memo of
// names handed out, which is safe for concurrent use.
type binaryFile struct {
	buildID string
	loads   []segment
	tab     symtab
	// named memoizes the names handed out, by symbol index: demangled
	// the first time a symbol is hit, not for every symbol at load, and
	// decoded out of tab.names, so that the frames, stacks and tables that
	// keep a name do not keep the whole table alive once the binary cache
	// evicted it.
	named sync.Map
}

// bytes is about the memory the binary's symbol table takes, as the
// binary cache counts it: the symbols, their names and the segments.
func (b *binaryFile) bytes() int64 {
	return int64(len(b.tab.syms))*int64(unsafe.Sizeof(symbol{})) + int64(len(b.tab.names)) +
		int64(len(b.loads))*int64(unsafe.Sizeof(segment{})) + int64(len(b.buildID))
}

// segment is a PT_LOAD program header: the file bytes [off, off+filesz)
// are loaded at the virtual address vaddr.
type segment struct {
	off, vaddr, filesz uint64
}

// loadBinary reads the load segments and the function symbols of an ELF
// file: those of .symtab; when it has none (a stripped distribution
// binary), those of the .symtab of its separate debug file found by build id
// under debugDir, if installed; else those of .dynsym. perf does the same,
// so both name functions alike (libc's write is __GI___libc_write with its
// debug file, write without). Go binaries add those of .gopclntab.
//
// The sections of a file opened over its mapping (openELF) are read in
// place, and the candidates' names point into them: nothing but the
// table's own copy of the names outlives the load, and a fault reading
// them (the file truncated meanwhile) is an error.
func loadBinary(f *elf.File, buildID, debugDir string) (*binaryFile, error) {
	b := &binaryFile{buildID: buildID}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			b.loads = append(b.loads, segment{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz})
		}
	}
	trim := trimOf(f)
	err := catchFaults(func() error {
		cands, err := readFuncSymbols(f, elf.SHT_SYMTAB, trim)
		if err != nil {
			return fmt.Errorf("read .symtab: %w", err)
		}
		if len(cands) == 0 {
			var closeDebug func()
			cands, closeDebug = debugFileSymbols(debugDir, buildID, trim)
			defer closeDebug() // once the names are copied
		}
		if len(cands) == 0 {
			if cands, err = readFuncSymbols(f, elf.SHT_DYNSYM, trim); err != nil {
				return fmt.Errorf("read .dynsym: %w", err)
			}
		}
		if cands, err = addGoFuncs(cands, f, trim); err != nil {
			return err
		}
		b.tab = buildSymtab(cands, trim, true)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// debugFileSymbols returns the function symbols of the separate debug file
// of the binary with this GNU build id, or none when it is not installed or
// unreadable, and the function to call once their names are no longer
// read (they may point into the file's mapping, which trim then trims
// too). A separate debug file keeps the binary's virtual addresses.
func debugFileSymbols(debugDir, buildID string, trim *pageTrim) ([]candidate, func()) {
	none := func() {}
	if debugDir == "" || len(buildID) < 3 || strings.ContainsRune(buildID, '/') {
		return nil, none
	}
	f, err := os.Open(filepath.Join(debugDir, ".build-id", buildID[:2], buildID[2:]+".debug"))
	if err != nil {
		return nil, none
	}
	defer f.Close()
	df, closeDF, err := openELF(f)
	if err != nil {
		return nil, none
	}
	trim.add(df)
	cands, err := readFuncSymbols(df, elf.SHT_SYMTAB, trim)
	if err != nil {
		closeDF()
		return nil, none
	}
	return cands, closeDF
}

// readFuncSymbols returns the defined function symbols (STT_FUNC and
// STT_GNU_IFUNC) of the file's symbol table of type typ, SHT_SYMTAB or
// SHT_DYNSYM, or none when it has no such table. The table is read in
// place: unlike elf.File.Symbols, no elf.Symbol is built, nor string
// allocated, for each of its symbols, most of which are not functions.
// The names point into the string table: into the file's mapping, if it
// was opened over one (see loadBinary), whose pages trim trims as the
// table is read.
func readFuncSymbols(f *elf.File, typ elf.SectionType, trim *pageTrim) ([]candidate, error) {
	i := slices.IndexFunc(f.Sections, func(s *elf.Section) bool { return s.Type == typ })
	if i < 0 {
		return nil, nil
	}
	sec := f.Sections[i]
	if sec.Link == 0 || int(sec.Link) >= len(f.Sections) {
		return nil, fmt.Errorf("section %s links to no string table (%d)", sec.Name, sec.Link)
	}
	data, err := sectionData(sec)
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", sec.Name, err)
	}
	strs, err := sectionData(f.Sections[sec.Link])
	if err != nil {
		return nil, fmt.Errorf("string table of %s: %w", sec.Name, err)
	}
	// One string that all names share: the string table in place, or its
	// copy, which nothing else holds.
	names := unsafe.String(unsafe.SliceData(strs), len(strs))

	// An entry is Elf64_Sym (name, info, other, section, value, size) or
	// Elf32_Sym (name, value, size, info, other, section); the first one
	// is the undefined symbol.
	order, entSize, infoAt := f.ByteOrder, 24, 4
	if f.Class == elf.ELFCLASS32 {
		entSize, infoAt = 16, 12
	}
	isFunc := func(info byte) bool {
		t := elf.ST_TYPE(info)
		return t == elf.STT_FUNC || t == elf.STT_GNU_IFUNC
	}
	entries := data[min(entSize, len(data)):]
	funcs := 0 // to allocate the candidates once
	for e := entries; len(e) >= entSize; e = e[entSize:] {
		trim.touch(unsafe.Pointer(unsafe.SliceData(e)), entSize)
		if isFunc(e[infoAt]) {
			funcs++
		}
	}
	cands := make([]candidate, 0, funcs)
	for e := entries; len(e) >= entSize; e = e[entSize:] {
		trim.touch(unsafe.Pointer(unsafe.SliceData(e)), entSize)
		var (
			nameOff     = uint64(order.Uint32(e))
			info        byte
			section     elf.SectionIndex
			value, size uint64
		)
		if f.Class == elf.ELFCLASS32 {
			value, size = uint64(order.Uint32(e[4:])), uint64(order.Uint32(e[8:]))
			info, section = e[12], elf.SectionIndex(order.Uint16(e[14:]))
		} else {
			info, section = e[4], elf.SectionIndex(order.Uint16(e[6:]))
			value, size = order.Uint64(e[8:]), order.Uint64(e[16:])
		}
		if !isFunc(info) || section == elf.SHN_UNDEF || value == 0 {
			continue
		}
		if nameOff >= uint64(len(names)) {
			continue
		}
		name, _, terminated := strings.Cut(names[nameOff:], "\x00")
		trim.touch(unsafe.Pointer(unsafe.StringData(names[nameOff:])), len(name)+1)
		if name == "" || !terminated {
			continue
		}
		cands = append(cands, candidate{addr: value, size: size, name: name, rank: rankELF, bind: elf.ST_BIND(info)})
	}
	return cands, nil
}

// vaddr translates a file offset to the ELF virtual address through the
// PT_LOAD segment that holds it. An offset outside every segment is
// returned unchanged.
func (b *binaryFile) vaddr(off uint64) uint64 {
	for _, s := range b.loads {
		if off >= s.off && off-s.off < s.filesz {
			return off - s.off + s.vaddr
		}
	}
	return off
}

// lookup returns the (demangled) name of the function containing the
// virtual address addr, a string of its own.
func (b *binaryFile) lookup(addr uint64) (string, bool) {
	i, ok := b.tab.lookup(addr)
	if !ok {
		return "", false
	}
	if d, ok := b.named.Load(i); ok {
		return d.(string), true
	}
	name := b.tab.name(i)
	if strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R") {
		name = demangleName(name)
	}
	// The name is a string of its own either way: tab's names are
	// front-coded (buildSymtab), name decodes them into a new one.
	b.named.Store(i, name)
	return name, true
}

// demangleName demangles C++ and Rust symbols. C++ names drop their
// parameter lists, also those of enclosing functions, so that a method
// reads "ns::Class::method"; legacy Rust names drop their "::h<hash>"
// suffix. Names that do not demangle are returned as they are.
func demangleName(name string) string {
	return demangle.Filter(name, demangle.NoParams, demangle.NoEnclosingParams)
}
