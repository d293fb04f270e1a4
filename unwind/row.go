package unwind

import (
	"encoding/binary"
	"fmt"
)

// CFAKind says how a row finds the canonical frame address.
type CFAKind uint8

// The CFA kinds, numbered as the BPF program's HS_CFA_* (bpf/profile.bpf.c).
const (
	// CFANone: no CFI covers this address (the end of an FDE with none
	// after it). The walk falls back to frame pointers.
	CFANone CFAKind = 0
	// CFARSP: CFA = rsp + Offset.
	CFARSP CFAKind = 1
	// CFARBP: CFA = rbp + Offset.
	CFARBP CFAKind = 2
	// CFAPLT: a PLT stub's CFA, rsp + Offset, plus 8 when
	// (pc & 15) >= Threshold (the expression every PLT's CFI carries).
	CFAPLT CFAKind = 3
	// CFASignal: a signal trampoline; the interrupted frame's rip, rsp and
	// rbp are in the ucontext at rsp.
	CFASignal CFAKind = 4
	// CFAUnsupported: a rule the BPF walk cannot follow (a DWARF
	// expression, another register, a return address not at CFA−8). The
	// walk stops here.
	CFAUnsupported CFAKind = 5
	// CFAEnd: the return address is undefined: the outermost frame
	// (_start, a thread's start). The walk ends here, complete.
	CFAEnd CFAKind = 6
)

// RBPKind says where the caller's rbp is.
type RBPKind uint8

// The rbp kinds, numbered as the BPF program's HS_RBP_*.
const (
	// RBPUnchanged: rbp keeps its value (same value, or never saved).
	RBPUnchanged RBPKind = 0
	// RBPAtCFA: the caller's rbp is saved at CFA + Offset.
	RBPAtCFA RBPKind = 1
	// RBPUnsupported: in another register or behind an expression: the
	// caller's rbp is unknown.
	RBPUnsupported RBPKind = 2
)

// Row is one row of an unwind table: the rules from PC up to the next
// row's PC.
type Row struct {
	// PC is an ELF virtual address of the binary (before load bias).
	PC uint64
	// CFA and CFAOffset: how to find the canonical frame address.
	CFA       CFAKind
	CFAOffset int32
	// Threshold is the PLT rule's (pc & 15) threshold (CFAPLT only).
	Threshold uint8
	// RBP and RBPOffset: where the caller's rbp is.
	RBP       RBPKind
	RBPOffset int32
}

func (r Row) String() string {
	var cfa string
	switch r.CFA {
	case CFANone:
		cfa = "none"
	case CFARSP:
		cfa = fmt.Sprintf("rsp+%d", r.CFAOffset)
	case CFARBP:
		cfa = fmt.Sprintf("rbp+%d", r.CFAOffset)
	case CFAPLT:
		cfa = fmt.Sprintf("plt(rsp+%d,>=%d)", r.CFAOffset, r.Threshold)
	case CFASignal:
		cfa = "signal"
	case CFAEnd:
		cfa = "end"
	default:
		cfa = "unsupported"
	}
	rbp := "u"
	switch r.RBP {
	case RBPAtCFA:
		rbp = fmt.Sprintf("c%+d", r.RBPOffset)
	case RBPUnsupported:
		rbp = "?"
	}
	return fmt.Sprintf("%#x %s rbp=%s", r.PC, cfa, rbp)
}

// sameRule reports whether two rows unwind alike.
func (r Row) sameRule(o Row) bool {
	return r.CFA == o.CFA && r.CFAOffset == o.CFAOffset && r.Threshold == o.Threshold &&
		r.RBP == o.RBP && r.RBPOffset == o.RBPOffset
}

// RowSize is the size of one row as the BPF program reads it (struct
// hs_row: pc u32, cfa_off s16, rbp_off s16, cfa u8, rbp u8, arg u8, pad).
const RowSize = 12

// MaxPC is the highest row address the BPF encoding holds (32 bits).
const MaxPC = 1<<32 - 1

// AppendBPF appends r in the BPF program's layout. Compile makes only
// rows that fit it (PCs up to MaxPC, offsets of 16 bits).
func (r Row) AppendBPF(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(r.PC))
	b = le.AppendUint16(b, uint16(int16(r.CFAOffset)))
	b = le.AppendUint16(b, uint16(int16(r.RBPOffset)))
	return append(b, byte(r.CFA), byte(r.RBP), r.Threshold, 0)
}

// decodeBPFRow is AppendBPF's inverse.
func decodeBPFRow(b []byte) (Row, error) {
	le := binary.LittleEndian
	r := Row{
		PC:        uint64(le.Uint32(b[0:4])),
		CFAOffset: int32(int16(le.Uint16(b[4:6]))),
		RBPOffset: int32(int16(le.Uint16(b[6:8]))),
		CFA:       CFAKind(b[8]),
		RBP:       RBPKind(b[9]),
		Threshold: b[10],
	}
	if r.CFA > CFAEnd || r.RBP > RBPUnsupported {
		return r, fmt.Errorf("row at %#x: kinds %d/%d out of range", r.PC, r.CFA, r.RBP)
	}
	return r, nil
}

// fits reports whether offsets fit the 16-bit BPF encoding.
func fits(off int64) bool { return off >= -1<<15 && off < 1<<15 }
