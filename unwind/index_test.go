package unwind

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
)

// checkIndex checks that for pc, the index's range holds the row Lookup
// finds, the BPF walk's binary search over that range finds it too, and the
// range is no wider than the bucket's rows.
func checkIndex(t *testing.T, rows []Row, x Index, pc uint64) {
	t.Helper()
	want := sort.Search(len(rows), func(i int) bool { return rows[i].PC > pc }) - 1
	lo, hi, ok := x.Range(pc)
	if want < 0 {
		if ok {
			t.Fatalf("pc %#x before the first row %#x: range %d-%d, want none", pc, rows[0].PC, lo, hi)
		}
		return
	}
	if !ok || int(lo) > want || int(hi) < want {
		t.Fatalf("pc %#x: range %d-%d (ok %v), row %d (%#x) covers it", pc, lo, hi, ok, want, rows[want].PC)
	}
	// The walk's search: the last row at or before pc among lo..hi.
	l, h := lo, hi+1
	for l < h {
		mid := l + (h-l)/2
		if rows[mid].PC <= pc {
			l = mid + 1
		} else {
			h = mid
		}
	}
	if int(l)-1 != want {
		t.Fatalf("pc %#x: the search over %d-%d finds row %d, want %d", pc, lo, hi, int(l)-1, want)
	}
}

// checkIndexAll checks every row's first and last address, the addresses
// on either side, and random ones, and the index's size bound.
func checkIndexAll(t *testing.T, rows []Row) Index {
	t.Helper()
	x := BuildIndex(rows)
	if n := IndexSlots(rows); n > len(rows)/8+1 {
		t.Fatalf("%d rows: %d index slots, more than an eighth of them", len(rows), n)
	}
	if got, want := len(x.AppendBPF(nil)), IndexSlots(rows)*RowSize; got != want {
		t.Fatalf("%d rows: the index's BPF encoding is %d bytes, IndexSlots says %d", len(rows), got, want)
	}
	for i, r := range rows {
		checkIndex(t, rows, x, r.PC)
		if r.PC > 0 {
			checkIndex(t, rows, x, r.PC-1)
		}
		if i+1 < len(rows) {
			checkIndex(t, rows, x, rows[i+1].PC-1)
		}
	}
	checkIndex(t, rows, x, rows[len(rows)-1].PC+1)
	checkIndex(t, rows, x, rows[len(rows)-1].PC+1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	span := rows[len(rows)-1].PC - rows[0].PC + 64
	for range 10000 {
		checkIndex(t, rows, x, rows[0].PC+rng.Uint64N(span))
	}
	return x
}

func TestIndexSynthetic(t *testing.T) {
	cases := map[string][]uint64{
		"one row":              {0x1000},
		"two rows":             {0x1000, 0x1001},
		"a wide gap":           {0x1000, 0x1004, 0x1008, 0x1010, 0x900000, 0x900001, 0x900002, 0x900040},
		"dense then sparse":    {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1000, 0x2000, 0x3000},
		"up to the 32-bit end": {0, 0x7fffffff, MaxPC - 1, MaxPC},
	}
	for name, pcs := range cases {
		t.Run(name, func(t *testing.T) {
			rows := make([]Row, len(pcs))
			for i, pc := range pcs {
				rows[i] = Row{PC: pc, CFA: CFARSP, CFAOffset: 8}
			}
			checkIndexAll(t, rows)
		})
	}
}

func TestIndexLibc(t *testing.T) {
	if _, err := os.Stat(libcPath); err != nil {
		t.Skipf("no %s on this system: %v", libcPath, err)
	}
	tab := compilePath(t, libcPath)
	x := checkIndexAll(t, tab.Rows)
	// The point of the index: few rows to search per pc.
	var widest, sum uint32
	for b := range len(x.First) - 1 {
		w := x.First[b+1] - x.First[b] + 1
		widest = max(widest, w)
		sum += w
	}
	avg := float64(sum) / float64(len(x.First)-1)
	t.Logf("libc: %d rows, %d buckets of %d bytes, %.1f rows per bucket's range on average, %d at most",
		len(tab.Rows), len(x.First)-1, 1<<x.Shift, avg, widest)
	if avg > 8 {
		t.Errorf("libc: %.1f rows per bucket's range on average, want at most 8", avg)
	}
}

func TestIndexBPFLayout(t *testing.T) {
	x := Index{Base: 0x1000, Shift: 4, First: []uint32{0, 2, 5, 9}}
	b := x.AppendBPF(nil)
	want := []uint32{0, 2, 5, 5, 9, 9}
	if len(b) != len(want)*4 {
		t.Fatalf("%d bytes, want %d", len(b), len(want)*4)
	}
	for i, w := range want {
		if got := binary.LittleEndian.Uint32(b[4*i:]); got != w {
			t.Errorf("word %d: %d, want %d", i, got, w)
		}
	}
}

func TestTableSizeCountsIndex(t *testing.T) {
	rows := make([]Row, 100)
	for i := range rows {
		rows[i] = Row{PC: uint64(0x1000 + 16*i), CFA: CFARSP, CFAOffset: 8}
	}
	tab := &Table{Rows: rows}
	if got, want := tab.Size(), (100+IndexSlots(rows))*RowSize; got != want || IndexSlots(rows) == 0 {
		t.Fatalf("size %d, want %d (100 rows and %d index slots)", got, want, IndexSlots(rows))
	}
}
