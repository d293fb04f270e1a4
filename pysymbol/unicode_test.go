package pysymbol

import (
	"encoding/binary"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/heatscope/heatscope/pyinterp"
)

// strObject lays out a compact str object as layout l of version v does.
func strObject(l pyinterp.Layout, state uint32, length int64, chars []byte) []byte {
	off := l.UnicodeCompactData
	if state&pyinterp.UnicodeASCII != 0 {
		off = l.UnicodeASCIIData
	}
	b := make([]byte, int(off)+len(chars))
	binary.LittleEndian.PutUint64(b[l.UnicodeLength:], uint64(length))
	binary.LittleEndian.PutUint32(b[l.UnicodeState:], state)
	copy(b[off:], chars)
	return b
}

const (
	compactASCII = pyinterp.UnicodeCompact | pyinterp.UnicodeASCII | 1<<pyinterp.UnicodeKindShift
	compact1     = pyinterp.UnicodeCompact | 1<<pyinterp.UnicodeKindShift
	compact2     = pyinterp.UnicodeCompact | 2<<pyinterp.UnicodeKindShift
	compact4     = pyinterp.UnicodeCompact | 4<<pyinterp.UnicodeKindShift
)

func layout311(t testing.TB) pyinterp.Layout {
	l, ok := pyinterp.LayoutFor(pyinterp.Version{Major: 3, Minor: 11})
	if !ok {
		t.Fatal("no 3.11 layout")
	}
	return l
}

func TestParseString(t *testing.T) {
	l := layout311(t)
	for _, c := range []struct {
		name  string
		obj   []byte
		want  string
		need  int
		wrong bool
	}{
		{"ascii", strObject(l, compactASCII, 5, []byte("inner")), "inner", 0, false},
		{"latin-1", strObject(l, compact1, 5, []byte{'g', 'r', 0xf6, 0xdf, 'e'}), "größe", 0, false},
		{"ucs-2", strObject(l, compact2, 2, []byte{0xfd, 0x51, 0x70, 0x65}), "函数", 0, false},
		{"ucs-4", strObject(l, compact4, 1, []byte{0x00, 0x00, 0x01, 0x00}), "𐀀", 0, false},
		{"lone surrogate", strObject(l, compact2, 1, []byte{0x00, 0xd8}), "\uFFFD", 0, false},
		{"cut short", strObject(l, compactASCII, 10, []byte("inner")), "", int(l.UnicodeASCIIData) + 10, false},
		{"not compact", strObject(l, pyinterp.UnicodeASCII|1<<pyinterp.UnicodeKindShift, 5, []byte("inner")), "", 0, true},
		{"kind 3", strObject(l, pyinterp.UnicodeCompact|3<<pyinterp.UnicodeKindShift, 1, []byte("abc")), "", 0, true},
		{"ascii of kind 2", strObject(l, compactASCII|2<<pyinterp.UnicodeKindShift, 1, []byte("ab")), "", 0, true},
		{"ascii over 127", strObject(l, compactASCII, 1, []byte{0xe9}), "", 0, true},
		{"beyond unicode", strObject(l, compact4, 1, []byte{0, 0, 0x11, 0}), "", 0, true},
		{"negative length", strObject(l, compactASCII, -1, nil), "", 0, true},
		{"too long", strObject(l, compactASCII, maxQualname+1, nil), "", 0, true},
		{"no header", []byte{1, 2, 3}, "", 0, true},
	} {
		s, need, err := parseString(&l, c.obj, maxQualname)
		if c.wrong {
			if !errors.Is(err, errGarbage) {
				t.Errorf("%s: %q, %v; want garbage", c.name, s, err)
			}
			continue
		}
		if err != nil || s != c.want || need != c.need {
			t.Errorf("%s: %q need %d, %v; want %q need %d", c.name, s, need, err, c.want, c.need)
		}
	}
}

func FuzzParseString(f *testing.F) {
	l := layout311(f)
	f.Add(strObject(l, compactASCII, 5, []byte("inner")))
	f.Add(strObject(l, compact2, 2, []byte{0xfd, 0x51, 0x70, 0x65}))
	f.Add(strObject(l, compact4, 1, []byte{0x00, 0x00, 0x01, 0x00}))
	f.Fuzz(func(t *testing.T, obj []byte) {
		s, need, err := parseString(&l, obj, maxQualname)
		if err != nil {
			return
		}
		if need > 0 {
			if need <= len(obj) || need > int(l.UnicodeCompactData)+4*maxQualname {
				t.Fatalf("need %d of a %d-byte object", need, len(obj))
			}
			return
		}
		if !utf8.ValidString(s) || utf8.RuneCountInString(s) > maxQualname {
			t.Fatalf("%q: not valid UTF-8 of at most %d characters", s, maxQualname)
		}
	})
}
