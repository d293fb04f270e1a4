package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DWARF register numbers on x86-64.
const (
	regRBP = 6
	regRSP = 7
	regRA  = 16
)

// CFA program opcodes (DWARF 5, section 6.4.2) and the GNU extensions
// found in .eh_frame.
const (
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExt   = 0x2f
	cfaHighAdvanceLoc    = 0x40
	cfaHighOffset        = 0x80
	cfaHighRestore       = 0xc0
	maxRememberedStates  = 64
	maxInstructionsPerFD = 1 << 16
)

// regRule is the rule for one register: where the caller's value is.
type regRule struct {
	kind   regKind
	offset int64
}

type regKind uint8

const (
	regSame      regKind = iota // same value (the default for rbp)
	regUndefined                // undefined (for the return address: outermost frame)
	regAtCFA                    // saved at CFA + offset
	regOther                    // another register, an expression, a value rule
)

// cfaRule is the CFA rule.
type cfaRule struct {
	reg    uint64
	offset int64
	expr   []byte // set for DW_CFA_def_cfa_expression
}

// state is one row's rules, for the registers the BPF walk uses.
type state struct {
	cfa    cfaRule
	rbp    regRule
	ra     regRule
	hasCFA bool
}

// program runs a CIE's or FDE's CFA instructions.
type program struct {
	codeAlign uint64
	dataAlign int64
	ptrSize   int
	initial   state // the state after the CIE's instructions
	st        state
	stack     []state
}

// errTruncated is a CFA program that ends inside an instruction.
var errTruncated = errors.New("CFA program truncated")

type reader struct {
	b   []byte
	off int
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) fixed(n int) (uint64, error) {
	if n > len(r.b)-r.off {
		return 0, errTruncated
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(r.b[r.off])
	case 2:
		v = uint64(binary.LittleEndian.Uint16(r.b[r.off:]))
	case 4:
		v = uint64(binary.LittleEndian.Uint32(r.b[r.off:]))
	case 8:
		v = binary.LittleEndian.Uint64(r.b[r.off:])
	default:
		return 0, fmt.Errorf("%d-byte operand", n)
	}
	r.off += n
	return v, nil
}

func (r *reader) uleb() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) sleb() (int64, error) {
	var v int64
	var shift uint
	var c byte
	for {
		var err error
		if c, err = r.byte(); err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	if shift < 64 && c&0x40 != 0 {
		v |= -1 << shift
	}
	return v, nil
}

func (r *reader) block() ([]byte, error) {
	n, err := r.uleb()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, errTruncated
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

// run executes code from loc, calling row(loc, state) before each advance
// of the location; it returns the location it ended at. For the CIE's
// initial instructions row is nil and an advance is an error.
func (p *program) run(code []byte, loc uint64, row func(uint64, state)) (uint64, error) {
	r := reader{b: code}
	for n := 0; r.off < len(r.b); n++ {
		if n >= maxInstructionsPerFD {
			return loc, fmt.Errorf("more than %d CFA instructions", maxInstructionsPerFD)
		}
		op, _ := r.byte()
		var advance uint64
		var err error
		switch op & 0xc0 {
		case cfaHighAdvanceLoc:
			advance = uint64(op & 0x3f)
		case cfaHighOffset:
			var off uint64
			off, err = r.uleb()
			p.setReg(uint64(op&0x3f), regRule{kind: regAtCFA, offset: int64(off) * p.dataAlign})
		case cfaHighRestore:
			p.restore(uint64(op & 0x3f))
		default:
			advance, err = p.op(op, &r, loc)
		}
		if err != nil {
			return loc, fmt.Errorf("CFA opcode %#x at %d: %w", op, r.off, err)
		}
		if advance != 0 {
			if row == nil {
				return loc, errors.New("location advance in a CIE's initial instructions")
			}
			row(loc, p.st)
			loc += advance
		}
	}
	return loc, nil
}

// op runs one extended opcode; it returns a location advance, if any.
func (p *program) op(op byte, r *reader, loc uint64) (uint64, error) {
	switch op {
	case cfaNop:
		return 0, nil
	case cfaGNUArgsSize:
		_, err := r.uleb()
		return 0, err
	case cfaSetLoc:
		to, err := r.fixed(p.ptrSize)
		if err != nil {
			return 0, err
		}
		if to < loc {
			return 0, fmt.Errorf("DW_CFA_set_loc back to %#x from %#x", to, loc)
		}
		return to - loc, nil
	case cfaAdvanceLoc1, cfaAdvanceLoc2, cfaAdvanceLoc4:
		n := map[byte]int{cfaAdvanceLoc1: 1, cfaAdvanceLoc2: 2, cfaAdvanceLoc4: 4}[op]
		d, err := r.fixed(n)
		return d * p.codeAlign, err
	case cfaOffsetExtended, cfaGNUNegOffsetExt:
		reg, err := r.uleb()
		if err != nil {
			return 0, err
		}
		off, err := r.uleb()
		sign := int64(1)
		if op == cfaGNUNegOffsetExt {
			sign = -1
		}
		p.setReg(reg, regRule{kind: regAtCFA, offset: sign * int64(off) * p.dataAlign})
		return 0, err
	case cfaOffsetExtendedSF:
		reg, err := r.uleb()
		if err != nil {
			return 0, err
		}
		off, err := r.sleb()
		p.setReg(reg, regRule{kind: regAtCFA, offset: off * p.dataAlign})
		return 0, err
	case cfaRestoreExtended:
		reg, err := r.uleb()
		p.restore(reg)
		return 0, err
	case cfaUndefined:
		reg, err := r.uleb()
		p.setReg(reg, regRule{kind: regUndefined})
		return 0, err
	case cfaSameValue:
		reg, err := r.uleb()
		p.setReg(reg, regRule{kind: regSame})
		return 0, err
	case cfaRegister:
		reg, err := r.uleb()
		if err != nil {
			return 0, err
		}
		_, err = r.uleb()
		p.setReg(reg, regRule{kind: regOther})
		return 0, err
	case cfaValOffset, cfaValOffsetSF:
		reg, err := r.uleb()
		if err != nil {
			return 0, err
		}
		if op == cfaValOffset {
			_, err = r.uleb()
		} else {
			_, err = r.sleb()
		}
		p.setReg(reg, regRule{kind: regOther})
		return 0, err
	case cfaExpression, cfaValExpression:
		reg, err := r.uleb()
		if err != nil {
			return 0, err
		}
		_, err = r.block()
		p.setReg(reg, regRule{kind: regOther})
		return 0, err
	case cfaRememberState:
		if len(p.stack) >= maxRememberedStates {
			return 0, fmt.Errorf("more than %d remembered states", maxRememberedStates)
		}
		p.stack = append(p.stack, p.st)
		return 0, nil
	case cfaRestoreState:
		if len(p.stack) == 0 {
			return 0, errors.New("DW_CFA_restore_state without a remembered state")
		}
		// The whole row is restored, the CFA rule with the registers,
		// as GCC's and LLVM's unwinders do.
		p.st = p.stack[len(p.stack)-1]
		p.stack = p.stack[:len(p.stack)-1]
		return 0, nil
	case cfaDefCFA, cfaDefCFASF:
		reg, err := r.uleb()
		if err != nil {
			return 0, err
		}
		var off int64
		if op == cfaDefCFA {
			var u uint64
			u, err = r.uleb()
			off = int64(u)
		} else {
			off, err = r.sleb()
			off *= p.dataAlign
		}
		p.st.cfa = cfaRule{reg: reg, offset: off}
		p.st.hasCFA = true
		return 0, err
	case cfaDefCFARegister:
		reg, err := r.uleb()
		p.st.cfa.reg, p.st.cfa.expr = reg, nil
		return 0, err
	case cfaDefCFAOffset:
		off, err := r.uleb()
		p.st.cfa.offset, p.st.cfa.expr = int64(off), nil
		return 0, err
	case cfaDefCFAOffsetSF:
		off, err := r.sleb()
		p.st.cfa.offset, p.st.cfa.expr = off*p.dataAlign, nil
		return 0, err
	case cfaDefCFAExpression:
		b, err := r.block()
		p.st.cfa = cfaRule{expr: b}
		p.st.hasCFA = true
		return 0, err
	}
	return 0, fmt.Errorf("unknown CFA opcode %#x", op)
}

func (p *program) setReg(reg uint64, rule regRule) {
	switch reg {
	case regRBP:
		p.st.rbp = rule
	case regRA:
		p.st.ra = rule
	}
}

func (p *program) restore(reg uint64) {
	switch reg {
	case regRBP:
		p.st.rbp = p.initial.rbp
	case regRA:
		p.st.ra = p.initial.ra
	}
}
