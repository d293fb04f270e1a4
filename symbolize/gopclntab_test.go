package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"
)

// goFunc is a function of a synthetic .gopclntab.
type goFunc struct {
	entry, end uint32 // offsets from the text start
	name       string
}

// makePclntab builds a little-endian Go 1.20 .gopclntab holding funcs,
// in the layout of the Go linker: header, function names, empty compile
// unit, file and PC-value tables, function table, then one 8-byte record
// per function (entry offset, name offset), the part of a record read.
func makePclntab(funcs []goFunc) []byte {
	le := binary.LittleEndian
	var names []byte
	nameOffs := make([]uint32, len(funcs))
	for i, fn := range funcs {
		nameOffs[i] = uint32(len(names))
		names = append(append(names, fn.name...), 0)
	}
	const headSize = 8 + 8*8
	namesAt := uint64(headSize)
	tablesAt := namesAt + uint64(len(names))
	funcTabSize := uint64(8 * (len(funcs) + 1))

	data := le.AppendUint32(nil, pclntabGo120)
	data = append(data, 0, 0, 1, 8)
	for _, w := range []uint64{uint64(len(funcs)), 0, 0, namesAt, tablesAt, tablesAt, tablesAt, tablesAt} {
		data = le.AppendUint64(data, w)
	}
	data = append(data, names...)
	for i, fn := range funcs {
		data = le.AppendUint32(data, fn.entry)
		data = le.AppendUint32(data, uint32(funcTabSize)+uint32(8*i))
	}
	if len(funcs) > 0 {
		data = le.AppendUint32(data, funcs[len(funcs)-1].end)
		data = le.AppendUint32(data, 0)
	}
	for i, fn := range funcs {
		data = le.AppendUint32(data, fn.entry)
		data = le.AppendUint32(data, nameOffs[i])
	}
	return data
}

func TestReadGoFuncsSynthetic(t *testing.T) {
	funcs := []goFunc{
		{0x00, 0x40, "main.main"},
		{0x40, 0x40, "empty"}, // no bytes: left out
		{0x40, 0x40, ""},      // no name: left out
		{0x40, 0x100, "runtime.memmove"},
		{0x100, 0x180, "fmt.(*pp).printArg"},
	}
	for i := 1; i < len(funcs); i++ {
		funcs[i-1].end = funcs[i].entry
	}
	data := makePclntab(funcs)
	got, offsets, err := readGoFuncs(bytes.NewReader(data), uint64(len(data)), binary.LittleEndian, 2, nil)
	if err != nil || !offsets {
		t.Fatalf("offsets %v, %v", offsets, err)
	}
	want := []candidate{
		{addr: 0x00, size: 0x40, name: "main.main", rank: rankGo},
		{addr: 0x40, size: 0xc0, name: "runtime.memmove", rank: rankGo},
		{addr: 0x100, size: 0x80, name: "fmt.(*pp).printArg", rank: rankGo},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if cap(got)-len(got) < 2 {
		t.Errorf("capacity %d for %d functions and 2 more", cap(got), len(got))
	}
}

// TestReadGoFuncsWindows reads more functions than a window holds, so
// that the windows slide.
func TestReadGoFuncsWindows(t *testing.T) {
	var funcs []goFunc
	for i := range 3 * windowSize / 8 {
		funcs = append(funcs, goFunc{uint32(16 * i), uint32(16*i + 16), "f" + strings.Repeat("x", i%7)})
	}
	data := makePclntab(funcs)
	got, _, err := readGoFuncs(bytes.NewReader(data), uint64(len(data)), binary.LittleEndian, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(funcs) {
		t.Fatalf("%d functions, want %d", len(got), len(funcs))
	}
	for i, c := range got {
		if c.addr != uint64(funcs[i].entry) || c.size != 16 || c.name != funcs[i].name {
			t.Fatalf("function %d = %+v, want %+v", i, c, funcs[i])
		}
	}
}

func TestReadGoFuncsCorrupt(t *testing.T) {
	valid := makePclntab([]goFunc{{0, 0x10, "a"}, {0x10, 0x20, "b"}})
	le := binary.LittleEndian
	for _, tc := range []struct {
		name   string
		modify func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"short header", func(b []byte) []byte { return b[:20] }},
		{"bad pointer size", func(b []byte) []byte { b[7] = 3; return b }},
		{"too many functions", func(b []byte) []byte { le.PutUint64(b[8:], 1<<40); return b }},
		{"names beyond the section", func(b []byte) []byte { le.PutUint64(b[8+3*8:], 1<<40); return b }},
		{"functions beyond the section", func(b []byte) []byte { le.PutUint64(b[8+7*8:], 1<<40); return b }},
		{"record beyond the table", func(b []byte) []byte { return b[:len(b)-4] }},
		{"name beyond the table", func(b []byte) []byte { le.PutUint32(b[len(b)-4:], 1000); return b }},
		{"unterminated name", func(b []byte) []byte {
			b[8+8*8+len("a\x00b")] = 'c' // the name table ends with "b\x00"
			return b
		}},
	} {
		data := tc.modify(slices.Clone(valid))
		if got, _, err := readGoFuncs(bytes.NewReader(data), uint64(len(data)), le, 0, nil); err == nil {
			t.Errorf("%s: no error, %+v", tc.name, got)
		}
	}

	// A section header claiming 1 TiB, a table claiming 2^30 functions:
	// an error, without allocating for them.
	data := slices.Clone(valid)
	le.PutUint64(data[8:], 1<<30)
	if got, _, err := readGoFuncs(bytes.NewReader(data), 1<<40, le, 0, nil); err == nil {
		t.Errorf("corrupt sizes: no error, %d functions", len(got))
	}
}

// FuzzGoFuncs checks that readGoFuncs survives any section content, and
// a section size beyond it (extra bytes that cannot be read), and returns
// only functions with bytes and a name.
func FuzzGoFuncs(f *testing.F) {
	f.Add(makePclntab([]goFunc{{0, 0x10, "main.main"}, {0x10, 0x30, "main.f"}}), uint32(0))
	f.Add(makePclntab(nil), uint32(1<<31))
	f.Fuzz(func(t *testing.T, data []byte, extra uint32) {
		funcs, _, err := readGoFuncs(bytes.NewReader(data), uint64(len(data))+uint64(extra), binary.LittleEndian, 0, nil)
		if err != nil {
			return
		}
		for _, fn := range funcs {
			if fn.size == 0 || fn.name == "" || strings.IndexByte(fn.name, 0) >= 0 {
				t.Fatalf("function %+v", fn)
			}
		}
	})
}

// openTestBinary opens this test binary's ELF file until the test ends.
func openTestBinary(t *testing.T) *elf.File {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestReadGoFuncs compares readGoFuncs with debug/gosym's reading of this
// test binary's .gopclntab.
func TestReadGoFuncs(t *testing.T) {
	f := openTestBinary(t)
	sec := f.Section(".gopclntab")
	got, offsets, err := readGoFuncs(sec, sec.Size, f.ByteOrder, 0, nil)
	if err != nil || !offsets {
		t.Fatalf("readGoFuncs: offsets %v, %v", offsets, err)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, 0))
	if err != nil {
		t.Fatal(err)
	}
	var want []candidate
	for _, fn := range tab.Funcs {
		if fn.End > fn.Entry {
			want = append(want, candidate{addr: fn.Entry, size: fn.End - fn.Entry, name: fn.Name, rank: rankGo})
		}
	}
	if len(want) < 1000 || !slices.Equal(got, want) {
		t.Errorf("%d functions, debug/gosym reads %d, or they differ", len(got), len(want))
	}
}
