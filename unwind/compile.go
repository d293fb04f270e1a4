package unwind

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// ErrNoCFI is returned for a binary without .eh_frame or .debug_frame.
var ErrNoCFI = errors.New("no call frame information (.eh_frame or .debug_frame)")

// Table is one binary's unwind table.
type Table struct {
	// BuildID is the binary's GNU build id in hex ("" without one).
	BuildID string
	// Rows are sorted by PC, each covering up to the next row's PC.
	Rows []Row
	// Stats says what the table was built from.
	Stats Stats
}

// Stats describes a table's making.
type Stats struct {
	// EHFrameBytes and DebugFrameBytes are the sizes of the sections read.
	EHFrameBytes, DebugFrameBytes int
	// FDEs is the number of frame description entries compiled; Skipped
	// those left out (empty, overlapping an earlier one, or a CFA program
	// that could not be run).
	FDEs, Skipped int
	// Unsupported is the number of rows the BPF walk cannot follow.
	Unsupported int
}

// Lookup returns the row covering pc (an ELF virtual address), and false
// when pc is before the first row.
func (t *Table) Lookup(pc uint64) (Row, bool) {
	i := sort.Search(len(t.Rows), func(i int) bool { return t.Rows[i].PC > pc })
	if i == 0 {
		return Row{}, false
	}
	return t.Rows[i-1], true
}

// Size is the table's size in bytes as loaded into a BPF map: its rows
// and their index (BuildIndex).
func (t *Table) Size() int { return (len(t.Rows) + IndexSlots(t.Rows)) * RowSize }

// CompileFile builds the unwind table of an x86-64 ELF file from its
// .eh_frame and, for addresses it does not cover, its .debug_frame.
func CompileFile(f *elf.File) (*Table, error) {
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("compile unwind table: %v %v binary: only x86-64 is supported", f.Class, f.Machine)
	}
	t := &Table{BuildID: BuildID(f)}
	var fdes []fde
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		if s.Addr == 0 {
			return nil, errors.New("compile unwind table: .eh_frame has no address (not a linked binary)")
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read .eh_frame: %w", err)
		}
		t.Stats.EHFrameBytes = len(data)
		parsed, err := parseFrames(data, s.Addr)
		if err != nil {
			return nil, fmt.Errorf("parse .eh_frame: %w", err)
		}
		fdes = append(fdes, parsed...)
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read .debug_frame: %w", err)
		}
		t.Stats.DebugFrameBytes = len(data)
		parsed, err := parseFrames(data, 0)
		if err != nil {
			return nil, fmt.Errorf("parse .debug_frame: %w", err)
		}
		fdes = append(fdes, parsed...)
	}
	if len(fdes) == 0 {
		return nil, ErrNoCFI
	}
	if err := t.compile(fdes); err != nil {
		return nil, err
	}
	return t, nil
}

// fde is a parsed FDE with what compiling it needs.
type fde struct {
	begin, end uint64
	code       []byte
	cie        *frame.CommonInformationEntry
	// prio orders FDEs of the same address: .eh_frame before .debug_frame.
	prio int
}

// parseFrames parses a .eh_frame (ehFrameAddr, its address) or a
// .debug_frame (ehFrameAddr 0) with delve's parser, which may panic on
// malformed input: that is an error here.
func parseFrames(data []byte, ehFrameAddr uint64) (fdes []fde, err error) {
	defer func() {
		if r := recover(); r != nil {
			fdes, err = nil, fmt.Errorf("malformed CFI: %v", r)
		}
	}()
	entries, err := frame.Parse(data, binary.LittleEndian, 0, 8, ehFrameAddr)
	if err != nil {
		return nil, err
	}
	prio := 0
	if ehFrameAddr == 0 {
		prio = 1
	}
	fdes = make([]fde, 0, len(entries))
	for _, e := range entries {
		if e.CIE == nil {
			continue
		}
		fdes = append(fdes, fde{begin: e.Begin(), end: e.End(), code: e.Instructions, cie: e.CIE, prio: prio})
	}
	return fdes, nil
}

// compile runs every FDE's program and merges the rows.
func (t *Table) compile(fdes []fde) error {
	slices.SortStableFunc(fdes, func(a, b fde) int {
		if c := cmp.Compare(a.begin, b.begin); c != 0 {
			return c
		}
		return cmp.Compare(a.prio, b.prio)
	})
	rows := make([]Row, 0, len(fdes)*4)
	var end uint64 // the end of the last FDE compiled
	var fdeRows []Row
	for i := range fdes {
		rows = growRows(rows, i, len(fdes))
		d := &fdes[i]
		// An FDE at 0 is a discarded function's (linker garbage
		// collection); one overlapping the previous is a duplicate.
		if d.begin == 0 || d.end <= d.begin || d.begin < end {
			t.Stats.Skipped++
			continue
		}
		if d.end-1 > MaxPC {
			return fmt.Errorf("compile unwind table: code at %#x, beyond the 32-bit addresses the BPF tables hold", d.begin)
		}
		var err error
		fdeRows, err = compileFDE(fdeRows[:0], d)
		if err != nil {
			t.Stats.Skipped++
			continue
		}
		t.Stats.FDEs++
		// This FDE's start replaces the previous one's end marker.
		if n := len(rows); n > 0 && rows[n-1].CFA == CFANone && rows[n-1].PC == d.begin {
			rows = rows[:n-1]
		}
		for _, r := range fdeRows {
			if n := len(rows); n > 0 && rows[n-1].sameRule(r) {
				continue
			}
			if n := len(rows); n > 0 && rows[n-1].PC == r.PC {
				rows[n-1] = r // an advance of 0
				continue
			}
			rows = append(rows, r)
		}
		rows = append(rows, Row{PC: d.end, CFA: CFANone})
		end = d.end
	}
	for _, r := range rows {
		if r.CFA == CFAUnsupported {
			t.Stats.Unsupported++
		}
	}
	t.Rows = slices.Clip(rows)
	return nil
}

// growRows makes room in rows, where done FDEs of all have been compiled,
// for the next FDE's rows (a few), when it is full: for as many rows as
// all the FDEs will make at the rate of those done so far, and a tenth
// more. Left to append, its growth by a quarter at a time allocated 3.3
// times the table's rows in all (python3.11's 1.55 MB of rows, 4.7 MB
// allocated; libc's 3.32 times, 1.86 now), garbage that made the agent's
// collector run several times per table under its memory limit.
func growRows(rows []Row, done, all int) []Row {
	const room = 64 // more than an FDE makes
	if cap(rows)-len(rows) >= room || done == 0 {
		return rows
	}
	projected := len(rows)*all/done + len(rows)*all/done/10
	return slices.Grow(rows, max(projected-len(rows), len(rows)/4, room))
}

// compileFDE runs an FDE's CIE and FDE programs and appends its rows.
func compileFDE(rows []Row, d *fde) ([]Row, error) {
	cie := d.cie
	p := &program{codeAlign: cie.CodeAlignmentFactor, dataAlign: cie.DataAlignmentFactor, ptrSize: 8}
	// The return address is at CFA−8 unless the CIE says otherwise: the
	// x86-64 psABI's CIEs all say DW_CFA_offset r16 at −8.
	p.st.rbp = regRule{kind: regSame}
	p.st.ra = regRule{kind: regSame}
	if cie.ReturnAddressRegister != regRA {
		return nil, fmt.Errorf("return address in register %d", cie.ReturnAddressRegister)
	}
	if _, err := p.run(cie.InitialInstructions, d.begin, nil); err != nil {
		return nil, fmt.Errorf("CIE: %w", err)
	}
	p.initial = p.st
	signal := strings.Contains(cie.Augmentation, "S")
	emit := func(loc uint64, st state) {
		if loc >= d.end {
			return
		}
		rows = append(rows, toRow(loc, st, signal))
	}
	loc, err := p.run(d.code, d.begin, emit)
	if err != nil {
		return nil, err
	}
	emit(loc, p.st)
	return rows, nil
}

// toRow turns a DWARF row into the BPF walk's rules.
func toRow(pc uint64, st state, signal bool) Row {
	r := Row{PC: pc}
	switch {
	case st.ra.kind == regUndefined:
		r.CFA = CFAEnd
		return r
	case signal:
		r.CFA = CFASignal
		return r
	case st.ra.kind != regAtCFA || st.ra.offset != -8 || !st.hasCFA:
		r.CFA = CFAUnsupported
		return r
	case st.cfa.expr != nil:
		off, threshold, ok := pltExpression(st.cfa.expr)
		if !ok || !fits(off) {
			r.CFA = CFAUnsupported
			return r
		}
		r.CFA, r.CFAOffset, r.Threshold = CFAPLT, int32(off), threshold
	case (st.cfa.reg == regRSP || st.cfa.reg == regRBP) && fits(st.cfa.offset):
		r.CFA, r.CFAOffset = CFARSP, int32(st.cfa.offset)
		if st.cfa.reg == regRBP {
			r.CFA = CFARBP
		}
	default:
		r.CFA = CFAUnsupported
		return r
	}
	switch st.rbp.kind {
	case regAtCFA:
		if fits(st.rbp.offset) {
			r.RBP, r.RBPOffset = RBPAtCFA, int32(st.rbp.offset)
		} else {
			r.RBP = RBPUnsupported
		}
	case regOther:
		r.RBP = RBPUnsupported
	}
	return r
}

// DWARF expression opcodes of the PLT rule.
const (
	opBreg7  = 0x77 // DW_OP_breg7 (rsp)
	opBreg16 = 0x80 // DW_OP_breg16 (rip)
	opLit0   = 0x30
	opAnd    = 0x1a
	opGe     = 0x2a
	opShl    = 0x24
	opPlus   = 0x22
)

// pltExpression recognises the CFA expression binutils' ld gives PLT
// entries: rsp + off + ((rip & 15) >= threshold) << 3, i.e.
// DW_OP_breg7 off; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and;
// DW_OP_lit<threshold>; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus.
func pltExpression(expr []byte) (off int64, threshold uint8, ok bool) {
	r := reader{b: expr}
	if c, err := r.byte(); err != nil || c != opBreg7 {
		return 0, 0, false
	}
	off, err := r.sleb()
	if err != nil {
		return 0, 0, false
	}
	if c, err := r.byte(); err != nil || c != opBreg16 {
		return 0, 0, false
	}
	if ripOff, err := r.sleb(); err != nil || ripOff != 0 {
		return 0, 0, false
	}
	rest := expr[r.off:]
	if len(rest) != 7 || rest[0] != opLit0+15 || rest[1] != opAnd || rest[2] < opLit0 || rest[2] > opLit0+15 ||
		!bytes.Equal(rest[3:], []byte{opGe, opLit0 + 3, opShl, opPlus}) {
		return 0, 0, false
	}
	return off, rest[2] - opLit0, true
}

// BuildID returns the GNU build id of f in hex, or "".
func BuildID(f *elf.File) string {
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return ""
	}
	data, err := s.Data()
	if err != nil || len(data) < 16 {
		return ""
	}
	le := binary.LittleEndian
	namesz, descsz, typ := le.Uint32(data[0:4]), le.Uint32(data[4:8]), le.Uint32(data[8:12])
	nameEnd := 12 + (uint64(namesz)+3)&^3
	if typ != 3 || namesz != 4 || nameEnd+uint64(descsz) > uint64(len(data)) || string(data[12:15]) != "GNU" {
		return ""
	}
	return hex.EncodeToString(data[nameEnd : nameEnd+uint64(descsz)])
}
