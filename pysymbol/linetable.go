package pysymbol

// The location table of a code object (co_linetable, CPython 3.11 and
// later; Objects/locations.md in CPython's sources describes it) maps each
// range of code units (2-byte instructions) to a source location. It is a
// run of entries. An entry's first byte has its top bit set; bits 3 to 6
// are its form and bits 0 to 2 the length of its range less one, in code
// units. The bytes after it, none with the top bit set, depend on the form:
//
//   - 15: no location (the line unchanged for what follows, none for this range);
//   - 14: long form: line delta (signed varint), end line delta, start and
//     end column plus one (varints);
//   - 13: no columns: line delta (signed varint);
//   - 10, 11, 12: one line: the line delta is the form less 10, then start
//     and end column (a byte each);
//   - 0 to 9: short form: same line, one byte of columns.
//
// A varint is little-endian 6-bit chunks, 0x40 set on every chunk but the
// last; a signed varint is a varint whose low bit is the sign. Lines start
// at co_firstlineno and add each entry's delta, as CPython's advance() in
// Objects/codeobject.c does; like it, the entry after one is found as the
// next byte with the top bit set, so that a form's payload need not be
// understood to be skipped.

// Location-table forms that carry a line delta or say there is no line.
const (
	formOneLine0   = 10
	formNoColumns  = 13
	formLong       = 14
	formNoLocation = 15
)

// maxVarintChunks bounds a varint to 30 bits: no real line delta comes
// near, and a longer one is garbage.
const maxVarintChunks = 5

// Line returns the source line of the instruction at code unit instr of a
// code object whose location table is table and first line firstLine.
// An instruction before the first (instr < 0: a frame that has not started
// to run, whose instruction pointer is one unit before its code) is on the
// first line, as CPython's PyCode_Addr2Line says. ok is false when table
// does not cover instr, is malformed (a line below zero, (an entry that does not start with
// its top bit set, a varint too long)), or says the instruction has no
// line (compiler-made code: an implicit return, a cleanup).
func Line(table []byte, firstLine, instr int) (line int, ok bool) {
	if instr < 0 {
		return firstLine, true
	}
	line = firstLine
	start := 0
	for i := 0; i < len(table); {
		head := table[i]
		if head&0x80 == 0 {
			return 0, false
		}
		form := int(head>>3) & 15
		delta, good := lineDelta(form, table[i+1:])
		if !good {
			return 0, false
		}
		line += delta
		end := start + int(head&7) + 1
		if instr < end {
			if form == formNoLocation || line < 0 {
				return 0, false
			}
			return line, true
		}
		start = end
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return 0, false
}

// lineDelta is the line delta of an entry of form form whose payload
// starts payload.
func lineDelta(form int, payload []byte) (int, bool) {
	switch {
	case form == formNoColumns || form == formLong:
		return signedVarint(payload)
	case form >= formOneLine0 && form < formNoColumns:
		return form - formOneLine0, true
	default: // short forms and no location: the same line
		return 0, true
	}
}

// signedVarint decodes the signed varint at the start of b.
func signedVarint(b []byte) (int, bool) {
	u, ok := varint(b)
	if !ok {
		return 0, false
	}
	if u&1 != 0 {
		return -int(u >> 1), true
	}
	return int(u >> 1), true
}

// varint decodes the varint at the start of b: 6-bit chunks, least
// significant first, 0x40 set on each but the last.
func varint(b []byte) (uint32, bool) {
	var u uint32
	for i := 0; i < maxVarintChunks && i < len(b); i++ {
		c := b[i]
		if c&0x80 != 0 {
			return 0, false // the next entry started: cut short
		}
		u |= uint32(c&0x3f) << (6 * i)
		if c&0x40 == 0 {
			return u, true
		}
	}
	return 0, false
}
