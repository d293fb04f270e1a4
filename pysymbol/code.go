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
	// firstTraceable is _co_firsttraceable: the code unit before which
	// a frame is still being set up (see Incomplete).
	firstTraceable uint32
}

// Incomplete reports whether a frame of this code whose instruction is at
// byte offset off (pyinterp.Frame.Offset) is still being set up, before
// the code's first traceable instruction, as CPython's
// _PyFrame_IsIncomplete says of a frame no generator owns (the sampler
// marks those that may be: pyinterp.Frame.MayBeIncomplete).
// pyinterp.NoInstr, a frame that has not started, is.
func (c *Code) Incomplete(off uint32) bool {
	return off == pyinterp.NoInstr || uint64(off) < 2*uint64(c.firstTraceable)
}

// Line is the line of the instruction at byte offset off in the code
// (pyinterp.Frame.Offset), and false when the location table does not say
// (see Line). pyinterp.NoInstr, a frame that has not started, is on the
// first line, as CPython says.
func (c *Code) Line(off uint32) (int, bool) {
	if off == pyinterp.NoInstr {
		return c.FirstLine, true
	}
	if off%2 != 0 {
		return 0, false
	}
	return Line(c.lines, c.FirstLine, int(off/2))
}

// size is about the memory a cached Code takes.
func (c *Code) size() int64 {
	return int64(len(c.Qualname)+len(c.File)+len(c.lines)) + 96
}

// speculative is how many bytes after an object's header are read with
// it: most names and location tables whole, so that one read does.
const speculative = 192

// readCode reads the code object at addr in process pid: its header in
// one read, then its qualified name, file name and location table in
// another, and, for those longer than the speculative read, the rest.
func readCode(pid uint32, l *pyinterp.Layout, addr uint64) (*Code, error) {
	if addr == 0 || addr%8 != 0 {
		return nil, fmt.Errorf("code object at %#x: %w", addr, errGarbage)
	}
	head := make([]byte, l.CodeAdaptive)
	if err := readMemory(pid, addr, head); err != nil {
		return nil, fmt.Errorf("code object: %w", err)
	}
	c := &Code{}
	first := int32(word32(head, l.CodeFirstLineno))
	if first < 0 || first > maxFirstLine {
		return nil, fmt.Errorf("code object at %#x: first line %d: %w", addr, first, errGarbage)
	}
	c.FirstLine = int(first)
	c.firstTraceable = word32(head, l.CodeFirstTraceable)
	parts := []struct {
		what string
		addr uint64
		head uint32
	}{
		{"co_qualname", word(head, l.CodeQualname), l.UnicodeASCIIData},
		{"co_filename", word(head, l.CodeFilename), l.UnicodeASCIIData},
		{"co_linetable", word(head, l.CodeLinetable), l.BytesData},
	}
	objs := make([]*object, len(parts))
	total := 0
	for _, p := range parts {
		if p.addr == 0 || p.addr%8 != 0 {
			return nil, fmt.Errorf("%s of the code object at %#x: at %#x: %w", p.what, addr, p.addr, errGarbage)
		}
		total += int(p.head) + speculative
	}
	buf := make([]byte, total)
	for i, p := range parts {
		// head and more are one buffer, more right after head.
		h, m := int(p.head), int(p.head)+speculative
		objs[i] = &object{addr: p.addr, head: buf[:h:m], more: buf[h:m:m]}
		buf = buf[m:]
	}
	if err := readObjects(pid, objs); err != nil {
		return nil, fmt.Errorf("code object at %#x: %w", addr, err)
	}
	var err error
	if c.Qualname, err = readString(pid, l, objs[0], maxQualname); err != nil {
		return nil, fmt.Errorf("co_qualname of the code object at %#x: %w", addr, err)
	}
	if c.Qualname == "" || strings.ContainsFunc(c.Qualname, isControl) {
		return nil, fmt.Errorf("co_qualname %q of the code object at %#x: %w", c.Qualname, addr, errGarbage)
	}
	if c.File, err = readString(pid, l, objs[1], maxFilename); err != nil {
		return nil, fmt.Errorf("co_filename of the code object at %#x: %w", addr, err)
	}
	c.File = strings.Map(func(r rune) rune {
		if isControl(r) {
			return '\uFFFD'
		}
		return r
	}, c.File)
	if c.lines, err = readBytes(pid, l, objs[2], maxLineTable); err != nil {
		return nil, fmt.Errorf("co_linetable of the code object at %#x: %w", addr, err)
	}
	return c, nil
}

// isControl reports whether r is a control character, which no name the
// compiler makes holds.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// readString decodes the str object o, whose start was read, reading the
// rest of its characters if need be.
func readString(pid uint32, l *pyinterp.Layout, o *object, maxLen int) (string, error) {
	got := o.head[:o.n:o.n] // more follows head in its capacity
	s, need, err := parseString(l, got, maxLen)
	if err == nil && need > 0 {
		got = append(got, make([]byte, need-o.n)...)
		if err := readMemory(pid, o.addr+uint64(o.n), got[o.n:]); err != nil {
			return "", err
		}
		s, _, err = parseString(l, got, maxLen)
	}
	if err != nil {
		return "", fmt.Errorf("str at %#x: %w", o.addr, err)
	}
	return s, nil
}

// readBytes returns the contents of the bytes object o, whose start was
// read, of at most maxLen bytes, reading the rest if need be.
func readBytes(pid uint32, l *pyinterp.Layout, o *object, maxLen int) ([]byte, error) {
	got := o.head[:o.n:o.n]
	size := int64(word(got, l.BytesSize))
	if size < 0 || size > int64(maxLen) {
		return nil, fmt.Errorf("bytes at %#x: size %d (at most %d read): %w", o.addr, size, maxLen, errGarbage)
	}
	out := make([]byte, size)
	n := copy(out, got[l.BytesData:])
	if n < len(out) {
		if err := readMemory(pid, o.addr+uint64(o.n), out[n:]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
