package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// binaryFile is the symbol table of one ELF file, shared by every process
// that maps it. It is immutable after loadBinary but for the memo of
// demangled names, which is safe for concurrent use.
type binaryFile struct {
	buildID string
	loads   []segment
	tab     symtab
	// demangled memoizes demangled names by symbol index: demangling is
	// done the first time a symbol is hit, not for every symbol at load.
	demangled sync.Map
}

// segment is a PT_LOAD program header: the file bytes [off, off+filesz)
// are loaded at the virtual address vaddr.
type segment struct {
	off, vaddr, filesz uint64
}

// loadBinary reads the load segments and the function symbols of an ELF
// file: those of .symtab or, when it has none, of .dynsym (perf does the
// same, and the two would only list the same functions twice), and, for
// Go binaries, those of .gopclntab.
func loadBinary(f *elf.File, buildID string) (*binaryFile, error) {
	b := &binaryFile{buildID: buildID}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			b.loads = append(b.loads, segment{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz})
		}
	}

	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("read .symtab: %w", err)
	}
	if len(syms) == 0 {
		if syms, err = f.DynamicSymbols(); err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("read .dynsym: %w", err)
		}
	}
	cands := appendFuncSymbols(nil, syms)
	cands, err = appendGoFuncs(cands, f, syms)
	if err != nil {
		return nil, err
	}
	b.tab = buildSymtab(cands)
	return b, nil
}

// appendFuncSymbols appends the defined function symbols (STT_FUNC and
// STT_GNU_IFUNC) of syms.
func appendFuncSymbols(cands []candidate, syms []elf.Symbol) []candidate {
	for _, s := range syms {
		typ := elf.ST_TYPE(s.Info)
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Name == "" {
			continue
		}
		cands = append(cands, candidate{addr: s.Value, size: s.Size, name: s.Name, rank: rankELF, bind: elf.ST_BIND(s.Info)})
	}
	return cands
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
// virtual address addr.
func (b *binaryFile) lookup(addr uint64) (string, bool) {
	i, ok := b.tab.lookup(addr)
	if !ok {
		return "", false
	}
	name := b.tab.name(i)
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name, true
	}
	if d, ok := b.demangled.Load(i); ok {
		return d.(string), true
	}
	d := demangleName(name)
	b.demangled.Store(i, d)
	return d, true
}

// demangleName demangles C++ and Rust symbols. C++ names drop their
// parameter lists, also those of enclosing functions, so that a method
// reads "ns::Class::method"; legacy Rust names drop their "::h<hash>"
// suffix. Names that do not demangle are returned as they are.
func demangleName(name string) string {
	return demangle.Filter(name, demangle.NoParams, demangle.NoEnclosingParams)
}
