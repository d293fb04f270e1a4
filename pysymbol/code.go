package pysymbol

import (
	"fmt"
	"strings"

	"github.com/heatscope/heatscope/pyinterp"
)

// Bounds on what is read of a code object: longer is garbage, or not worth
// keeping.
const (
	maxQualname  = 1024
	maxFilename  = 4096
	maxLineTable = 256 << 10
	maxFirstLine = 1 << 24
)

// Code is what a code object says about the function it compiles.
type Code struct {
	// Qualname is co_qualname ("Trainer.step", "outer.<locals>.inner").
	Qualname string
	// File is co_filename (a path, or "<string>" and the like).
	File string
	// FirstLine is co_firstlineno.
	FirstLine int
	// lines is co_linetable (see Line).
	lines []byte
	// adaptive is where the code object's instructions start in its
	// process: its address plus the layout's co_code_adaptive.
	adaptive uint64
}

// Line is the line of the instruction that instr (a frame's instruction
// pointer: 3.11 and 3.12's prev_instr, 3.13's instr_ptr) points to, and
// false when the location table does not say (see Line).
func (c *Code) Line(instr uint64) (int, bool) {
	if instr == 0 {
		return 0, false
	}
	// prev_instr is one unit before the code before the first instruction runs.
	off := int64(instr - c.adaptive)
	if off%2 != 0 || off < -2 || off > 2*int64(maxLineTable)*8 {
		return 0, false
	}
	return Line(c.lines, c.FirstLine, int(off/2))
}

// size is about the memory a cached Code takes.
func (c *Code) size() int64 {
	return int64(len(c.Qualname)+len(c.File)+len(c.lines)) + 96
}

// readCode reads the code object at addr in process pid.
func readCode(pid uint32, l *pyinterp.Layout, addr uint64) (*Code, error) {
	if addr == 0 || addr%8 != 0 {
		return nil, fmt.Errorf("code object at %#x: %w", addr, errGarbage)
	}
	head := make([]byte, l.CodeAdaptive)
	if err := readMemory(pid, addr, head); err != nil {
		return nil, fmt.Errorf("code object: %w", err)
	}
	c := &Code{adaptive: addr + uint64(l.CodeAdaptive)}
	first := int32(word32(head, l.CodeFirstLineno))
	if first < 0 || first > maxFirstLine {
		return nil, fmt.Errorf("code object at %#x: first line %d: %w", addr, first, errGarbage)
	}
	c.FirstLine = int(first)
	var err error
	if c.Qualname, err = readString(pid, l, word(head, l.CodeQualname), maxQualname); err != nil {
		return nil, fmt.Errorf("co_qualname of the code object at %#x: %w", addr, err)
	}
	if c.Qualname == "" || strings.ContainsFunc(c.Qualname, isControl) {
		return nil, fmt.Errorf("co_qualname %q of the code object at %#x: %w", c.Qualname, addr, errGarbage)
	}
	if c.File, err = readString(pid, l, word(head, l.CodeFilename), maxFilename); err != nil {
		return nil, fmt.Errorf("co_filename of the code object at %#x: %w", addr, err)
	}
	c.File = strings.Map(func(r rune) rune {
		if isControl(r) {
			return '\uFFFD'
		}
		return r
	}, c.File)
	if c.lines, err = readBytes(pid, l, word(head, l.CodeLinetable), maxLineTable); err != nil {
		return nil, fmt.Errorf("co_linetable of the code object at %#x: %w", addr, err)
	}
	return c, nil
}

// isControl reports whether r is a control character, which no name the
// compiler makes holds.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// readBytes reads the bytes object at addr, of at most maxLen bytes.
func readBytes(pid uint32, l *pyinterp.Layout, addr uint64, maxLen int) ([]byte, error) {
	if addr == 0 || addr%8 != 0 {
		return nil, fmt.Errorf("bytes at %#x: %w", addr, errGarbage)
	}
	buf := make([]byte, int(l.BytesData)+stringHead)
	n, err := readMemorySpeculative(pid, addr, buf[:l.BytesData], buf[l.BytesData:])
	if err != nil {
		return nil, err
	}
	size := int64(word(buf, l.BytesSize))
	if size < 0 || size > int64(maxLen) {
		return nil, fmt.Errorf("bytes at %#x: size %d (at most %d read): %w", addr, size, maxLen, errGarbage)
	}
	end := int(l.BytesData) + int(size)
	if end <= n {
		return buf[l.BytesData:end:end], nil
	}
	out := make([]byte, size)
	copy(out, buf[l.BytesData:n])
	if err := readMemory(pid, addr+uint64(n), out[n-int(l.BytesData):]); err != nil {
		return nil, err
	}
	return out, nil
}
