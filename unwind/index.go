package unwind

import "encoding/binary"

// Index narrows the BPF walk's search for a pc's row to a few adjacent
// rows. The table's addresses from Base on are cut into buckets of
// 1<<Shift bytes, and First[b] is the index of the row covering the first
// address of bucket b (the last row at or before it): the row covering a
// pc of bucket b is one of rows First[b] to First[b+1], inclusive.
// First has one entry more than there are buckets, the last row's index.
//
// Without it the walk binary-searched the whole table, about 15 steps for
// libc's 28 000 rows, each a map lookup and, a sample being taken with
// cold caches, a cache miss; with it, one lookup of the index and a search
// of about 6 rows (3 steps) in one or two cache lines.
type Index struct {
	// Base is the first row's PC.
	Base uint32
	// Shift is the base-2 logarithm of the bucket size in bytes.
	Shift uint8
	// First holds, for each bucket, the row covering its first address,
	// then the last row's index.
	First []uint32
}

// minIndexShift is the smallest bucket, 16 bytes: a few instructions.
const minIndexShift = 4

// indexShape returns the bucket shift and count of the index of rows: the
// smallest buckets (from 16 bytes) of which there are at most a quarter as
// many as rows (so that the index, two buckets to a row's room, adds at
// most an eighth to the table's size), at least one.
func indexShape(rows []Row) (shift uint8, buckets int) {
	if len(rows) == 0 {
		return 0, 0
	}
	span := rows[len(rows)-1].PC - rows[0].PC
	limit := uint64(max(len(rows)/4, 1))
	shift = minIndexShift
	for span>>shift+1 > limit {
		shift++
	}
	return shift, int(span>>shift + 1)
}

// IndexSlots is the number of row-sized entries the index of rows takes
// after them in the BPF map: each holds three entries of First (a
// bucket's, the next one's and the one after), two buckets to an entry.
func IndexSlots(rows []Row) int {
	_, buckets := indexShape(rows)
	return (buckets + 1) / 2
}

// BuildIndex returns the index of rows, which are sorted by PC with PCs up
// to MaxPC (as Compile makes them).
func BuildIndex(rows []Row) Index {
	shift, buckets := indexShape(rows)
	if buckets == 0 {
		return Index{}
	}
	x := Index{Base: uint32(rows[0].PC), Shift: shift, First: make([]uint32, buckets+1)}
	i := 0
	for b := range buckets {
		start := rows[0].PC + uint64(b)<<shift
		for i+1 < len(rows) && rows[i+1].PC <= start {
			i++
		}
		x.First[b] = uint32(i)
	}
	x.First[buckets] = uint32(len(rows) - 1)
	return x
}

// Range returns the rows, from lo to hi inclusive, one of which covers pc
// (an ELF address), as the BPF walk finds them; ok is false for a pc
// before the first row.
func (x Index) Range(pc uint64) (lo, hi uint32, ok bool) {
	if len(x.First) == 0 || pc < uint64(x.Base) {
		return 0, 0, false
	}
	b := (pc - uint64(x.Base)) >> x.Shift
	if last := uint64(len(x.First) - 1); b >= last {
		return x.First[last], x.First[last], true
	}
	return x.First[b], x.First[b+1], true
}

// AppendBPF appends the index's slots in the BPF program's layout
// (struct hs_bucket: three little-endian uint32, RowSize bytes): slot j
// holds First[2j], First[2j+1] and First[2j+2], repeating the last row's
// index past the end.
func (x Index) AppendBPF(b []byte) []byte {
	n := len(x.First)
	if n == 0 {
		return b
	}
	at := func(i int) uint32 { return x.First[min(i, n-1)] }
	for j := range n / 2 {
		for k := range 3 {
			b = binary.LittleEndian.AppendUint32(b, at(2*j+k))
		}
	}
	return b
}
