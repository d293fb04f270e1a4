package unwind

import (
	"debug/elf"
	"os"
	"testing"
)

// FuzzCompileCFI feeds arbitrary bytes to the compiler as a .eh_frame
// section (and as a .debug_frame): it must return an error or a sorted
// table, never panic.
func FuzzCompileCFI(f *testing.F) {
	if ef, err := elf.Open(libcPath); err == nil {
		if s := ef.Section(".eh_frame"); s != nil {
			if b, err := s.Data(); err == nil && len(b) > 512 {
				f.Add(b[:512])
			}
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, addr := range []uint64{0x2000, 0} {
			fdes, err := parseFrames(data, addr)
			if err != nil {
				continue
			}
			tab := &Table{}
			if err := tab.compile(fdes); err != nil {
				continue
			}
			for i := 1; i < len(tab.Rows); i++ {
				if tab.Rows[i].PC <= tab.Rows[i-1].PC {
					t.Fatalf("rows not sorted: %v after %v", tab.Rows[i], tab.Rows[i-1])
				}
			}
			if _, err := DecodeTable(tab.Encode()); err != nil {
				t.Fatalf("a compiled table does not decode: %v", err)
			}
		}
	})
}

// FuzzDecodeTable feeds arbitrary cache files to DecodeTable.
func FuzzDecodeTable(f *testing.F) {
	f.Add((&Table{Rows: []Row{{PC: 0x1000, CFA: CFARSP, CFAOffset: 8}, {PC: 0x1010, CFA: CFANone}}}).Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := DecodeTable(data)
		if err != nil {
			return
		}
		if _, err := DecodeTable(tab.Encode()); err != nil {
			t.Fatalf("re-encoded table does not decode: %v", err)
		}
	})
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
