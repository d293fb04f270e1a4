package pysymbol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/heatscope/heatscope/pyinterp"
)

// Strings. A code object's names are str objects; the ones the compiler
// makes are compact (their characters follow the header in one
// allocation): ASCII ones right after a PyASCIIObject, others after a
// PyCompactUnicodeObject, one, two or four bytes a character (the kind).
// Only compact strings are read: a legacy one (its characters elsewhere)
// is refused. What is read is untrusted: lengths are bounded, a kind
// other than 1, 2 or 4, an ASCII string with a byte over 127 or a
// character that is no Unicode scalar value is refused as garbage.

// errGarbage is wrapped by the errors for memory that is not what a
// layout says it should be.
var errGarbage = errors.New("not a CPython object")

// parseString decodes the str object whose first bytes are b, of at most
// maxLen characters. When b does not hold all its characters it returns
// how many bytes would (need), and no string.
func parseString(l *pyinterp.Layout, b []byte, maxLen int) (s string, need int, err error) {
	kind, dataOff, length, err := stringShape(l, b, maxLen)
	if err != nil {
		return "", 0, err
	}
	end := int(dataOff) + length*kind
	if end > len(b) {
		return "", end, nil
	}
	s, err = decodeChars(b[dataOff:end], kind, dataOff == l.UnicodeASCIIData)
	return s, 0, err
}

// stringShape reads a str object's header from b: the bytes per
// character, where they start and how many there are.
func stringShape(l *pyinterp.Layout, b []byte, maxLen int) (kind int, dataOff uint32, length int, err error) {
	if uint64(l.UnicodeState)+4 > uint64(len(b)) || uint64(l.UnicodeLength)+8 > uint64(len(b)) {
		return 0, 0, 0, fmt.Errorf("a header of %d bytes: %w", len(b), errGarbage)
	}
	state := word32(b, l.UnicodeState)
	n := int64(word(b, l.UnicodeLength))
	kind = int(state>>pyinterp.UnicodeKindShift) & pyinterp.UnicodeKindMask
	switch {
	case state&pyinterp.UnicodeCompact == 0:
		return 0, 0, 0, fmt.Errorf("not a compact string (state %#x): %w", state, errGarbage)
	case kind != 1 && kind != 2 && kind != 4:
		return 0, 0, 0, fmt.Errorf("kind %d: %w", kind, errGarbage)
	case state&pyinterp.UnicodeASCII != 0 && kind != 1:
		return 0, 0, 0, fmt.Errorf("an ASCII string of kind %d: %w", kind, errGarbage)
	case n < 0 || n > int64(maxLen):
		return 0, 0, 0, fmt.Errorf("length %d (at most %d read): %w", n, maxLen, errGarbage)
	}
	dataOff = l.UnicodeCompactData
	if state&pyinterp.UnicodeASCII != 0 {
		dataOff = l.UnicodeASCIIData
	}
	return kind, dataOff, int(n), nil
}

// decodeChars turns a compact string's characters, kind bytes each, into
// UTF-8; ascii says every character must be below 128.
func decodeChars(b []byte, kind int, ascii bool) (string, error) {
	if kind == 1 {
		if ascii {
			for _, c := range b {
				if c >= utf8.RuneSelf {
					return "", fmt.Errorf("byte %#x in an ASCII string: %w", c, errGarbage)
				}
			}
			return string(b), nil
		}
	}
	var sb strings.Builder
	sb.Grow(len(b))
	for i := 0; i+kind <= len(b); i += kind {
		var r rune
		switch kind {
		case 1:
			r = rune(b[i]) // Latin-1
		case 2:
			r = rune(binary.LittleEndian.Uint16(b[i:]))
		default:
			r = rune(binary.LittleEndian.Uint32(b[i:]))
		}
		if r > utf8.MaxRune {
			return "", fmt.Errorf("character %#x: %w", r, errGarbage)
		}
		if !utf8.ValidRune(r) {
			r = utf8.RuneError // a lone surrogate, as from surrogateescape
		}
		sb.WriteRune(r)
	}
	return sb.String(), nil
}
