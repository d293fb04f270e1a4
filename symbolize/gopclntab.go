package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"fmt"
)

// appendGoFuncs appends the functions of a Go binary's .gopclntab, which
// stripped binaries (-ldflags=-s -w) keep because the runtime needs it.
// Files without the section are left alone.
func appendGoFuncs(cands []candidate, f *elf.File, syms []elf.Symbol) ([]candidate, error) {
	sec := f.Section(".gopclntab")
	if sec == nil {
		return cands, nil
	}
	data, err := sec.Data()
	if err != nil {
		return cands, fmt.Errorf("read .gopclntab: %w", err)
	}
	// Parsed against a text start of 0, the entries of a Go 1.18+ table
	// are offsets from the start of the Go text, found below; older
	// tables hold absolute addresses.
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, 0))
	if err != nil {
		return cands, fmt.Errorf("parse .gopclntab: %w", err)
	}
	text := uint64(0)
	if pcOffsets(data) {
		text = goTextStart(f, syms, tab.Funcs)
	}
	for _, fn := range tab.Funcs {
		if fn.End > fn.Entry {
			cands = append(cands, candidate{addr: text + fn.Entry, size: fn.End - fn.Entry, name: fn.Name, rank: rankGo})
		}
	}
	return cands, nil
}

// pcOffsets reports whether a pclntab is in a Go 1.18+ format, whose
// function entries are offsets from the text start.
func pcOffsets(pclntab []byte) bool {
	if len(pclntab) < 4 {
		return false
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch order.Uint32(pclntab) {
		case 0xfffffff0, 0xfffffff1: // Go 1.18, Go 1.20 magic
			return true
		}
	}
	return false
}

// goTextStart finds the address the .gopclntab offsets count from, with
// the ELF symbols syms (from .symtab, else .dynsym):
//   - the runtime.text symbol, when .symtab is there;
//   - else a Go function that .dynsym exports (cgo binaries export
//     crosscall2 and _cgo_topofstack): its address minus its offset;
//   - else the .text section's address, which is where the Go linker puts
//     runtime.text when it links alone (external linkers put C start-up
//     code first, hence the anchors above).
func goTextStart(f *elf.File, syms []elf.Symbol, funcs []gosym.Func) uint64 {
	for _, s := range syms {
		if s.Name == "runtime.text" {
			return s.Value
		}
	}
	exported := make(map[string]uint64)
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			exported[s.Name] = s.Value
		}
	}
	if len(exported) > 0 {
		for _, fn := range funcs {
			if addr, ok := exported[fn.Name]; ok && addr >= fn.Entry {
				return addr - fn.Entry
			}
		}
	}
	if text := f.Section(".text"); text != nil {
		return text.Addr
	}
	return 0
}
