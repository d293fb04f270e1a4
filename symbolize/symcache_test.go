package symbolize

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/heatscope/heatscope/sample"
)

// TestEvictedSymbolsComeBackFromDisk: a binary the memory bound evicted is
// read back from the disk cache, not from its ELF file, and names the same
// frame; a corrupt file is not trusted (the ELF file is read again and the
// file rewritten); without a cache directory nothing is written.
func TestEvictedSymbolsComeBackFromDisk(t *testing.T) {
	goBin := buildGo(t, false)
	goFx := start(t, goBin)
	cFx := startC(t)
	cStack, _, _ := cChain(t, cFx)
	goAddr := goFx.vars["main.hotGoFunction"]

	dir := t.TempDir()
	s := New(nil, Options{MaxBinaries: 1, SymbolCacheDir: dir, DebugDir: t.TempDir()})
	want := s.Symbolize(goFx.pid, nil, []uint64{goAddr})[0]
	if want.Function != "main.hotGoFunction" || want.BuildID == "" {
		t.Fatalf("Go fixture: %+v, want main.hotGoFunction with a build id", want)
	}
	file := filepath.Join(dir, "symbols", want.BuildID+".symbols")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the Go fixture's symbol table was not cached: %v", err)
	}
	// Each lookup a stack of its own (a byte further into the function),
	// which the stack cache has not seen.
	next := uint64(0)
	evictAndReload := func(when string) sample.Frame {
		t.Helper()
		next++
		if f := s.Symbolize(cFx.pid, nil, []uint64{cStack[0] + next})[0]; f.Function != "hot_c_function" {
			t.Fatalf("%s: C fixture: %+v, want hot_c_function", when, f)
		}
		f := s.Symbolize(goFx.pid, nil, []uint64{goAddr + next})[0]
		f.Address -= next
		return f
	}
	if got := evictAndReload("first eviction"); got != want {
		t.Errorf("from the disk cache: %+v, want %+v", got, want)
	}
	if st := s.Stats(); st.BinaryMisses != 3 || st.BinaryDiskHits != 1 {
		t.Errorf("after one eviction: %d binaries loaded, %d from disk; want 3 and 1", st.BinaryMisses, st.BinaryDiskHits)
	}

	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(good)
	bad[len(bad)-1] ^= 0xff
	if err := os.WriteFile(file, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := evictAndReload("corrupt file"); got != want {
		t.Errorf("with a corrupt cache file: %+v, want %+v", got, want)
	}
	if st := s.Stats(); st.BinaryMisses != 5 || st.BinaryDiskHits != 1 {
		t.Errorf("after a corrupt file: %d binaries loaded, %d from disk; want 5 and 1 (the ELF file read)", st.BinaryMisses, st.BinaryDiskHits)
	}
	if again, err := os.ReadFile(file); err != nil || !slices.Equal(again, good) {
		t.Errorf("the corrupt file was not rewritten (err %v)", err)
	}

	none := New(nil, Options{MaxBinaries: 1, DebugDir: t.TempDir()})
	none.Symbolize(goFx.pid, nil, []uint64{goAddr})
	none.Symbolize(cFx.pid, nil, cStack[:1])
	if f := none.Symbolize(goFx.pid, nil, []uint64{goAddr + 1})[0]; f.Function != want.Function || f.BuildID != want.BuildID {
		t.Errorf("without a disk cache: %+v, want %+v", f, want)
	}
	if st := none.Stats(); st.BinaryDiskHits != 0 || st.BinaryMisses != 3 {
		t.Errorf("without a disk cache: %d binaries loaded, %d from disk; want 3 and 0", st.BinaryMisses, st.BinaryDiskHits)
	}
}

// syntheticBinary is a small front-coded table with two segments.
func syntheticBinary() *binaryFile {
	cands := []candidate{
		{addr: 0x1000, size: 0x40, name: "main.main"},
		{addr: 0x1040, size: 0x20, name: "main.helper"},
		{addr: 0x1060, name: "main.helperTwo"},
		{addr: 0x2000, size: 0x10, name: "_ZN2ns5Class6methodEv"},
	}
	return &binaryFile{
		buildID: "0123456789abcdef",
		loads:   []segment{{off: 0, vaddr: 0x400000, filesz: 0x1000}, {off: 0x1000, vaddr: 0x401000, filesz: 0x2000}},
		tab:     buildSymtab(cands, nil, true),
	}
}

// TestSymbolsRoundTrip: what encodeSymbols writes, decodeSymbols reads
// back whole; every truncation of it is an error.
func TestSymbolsRoundTrip(t *testing.T) {
	b := syntheticBinary()
	enc := encodeSymbols(b)
	got, err := decodeSymbols(enc, b.buildID)
	if err != nil {
		t.Fatal(err)
	}
	if got.buildID != b.buildID || !slices.Equal(got.loads, b.loads) || !slices.Equal(got.tab.syms, b.tab.syms) ||
		got.tab.names != b.tab.names || got.tab.prefixed != b.tab.prefixed {
		t.Fatalf("decoded %+v, want %+v", got, b)
	}
	for _, addr := range []uint64{0x1000, 0x1041, 0x1070, 0x2005, 0x3000} {
		gn, gok := got.lookup(addr)
		wn, wok := b.lookup(addr)
		if gn != wn || gok != wok {
			t.Errorf("lookup %#x: %q %v, want %q %v", addr, gn, gok, wn, wok)
		}
	}
	for n := range len(enc) {
		if _, err := decodeSymbols(enc[:n], b.buildID); err == nil {
			t.Fatalf("decodeSymbols of the first %d of %d bytes: no error", n, len(enc))
		}
	}
}

func FuzzDecodeSymbols(f *testing.F) {
	f.Add(encodeSymbols(syntheticBinary()))
	f.Add([]byte(symbolsMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeSymbols(data, "0123456789abcdef")
		if err != nil {
			return
		}
		for i := range b.tab.len() {
			b.tab.name(i) // must not panic
		}
		for _, addr := range []uint64{0, 0x1000, 0x1041, 0x2005, 1 << 63} {
			b.lookup(b.vaddr(addr))
		}
	})
}
