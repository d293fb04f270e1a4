package profiler

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
)

// TestLookupAndDeleteBatch empties a hash map the size of unwind_pending
// with the raw batch read, in batches smaller than the map, and then finds
// it empty: every entry taken once, with its value.
func TestLookupAndDeleteBatch(t *testing.T) {
	bpftest.Require(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys, vals := make([]uint32, 64), make([]uint64, 64)
	var c batchCursor
	if n, err := lookupAndDeleteBatch(m, &c, true, keys, vals); n != 0 || err != errBatchDone {
		t.Fatalf("an empty map: %d entries, %v; want 0 and errBatchDone", n, err)
	}
	const entries = 700
	for pid := uint32(1); pid <= entries; pid++ {
		if err := m.Put(pid, uint64(pid)*1000+7); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ { // the cursor starts over
		taken := map[uint32]uint64{}
		calls := 0
		for start := true; ; start = false {
			n, err := lookupAndDeleteBatch(m, &c, start, keys, vals)
			calls++
			for i := range n {
				if _, dup := taken[keys[i]]; dup {
					t.Fatalf("pid %d taken twice", keys[i])
				}
				taken[keys[i]] = vals[i]
			}
			if err == errBatchDone {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		want := entries
		if round == 1 {
			want = 3
		}
		if len(taken) != want || calls < 2 && want > len(keys) {
			t.Fatalf("round %d: %d entries taken in %d calls, want %d", round, len(taken), calls, want)
		}
		for pid, mm := range taken {
			if mm != uint64(pid)*1000+7 {
				t.Fatalf("pid %d taken with %d, want %d", pid, mm, uint64(pid)*1000+7)
			}
		}
		var v uint64
		if err := m.Lookup(uint32(1), &v); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("round %d: pid 1 still in the map after the batch read (%v)", round, err)
		}
		for pid := uint32(1); pid <= 3; pid++ { // round 1 reads three
			if err := m.Put(pid+5000, uint64(pid+5000)*1000+7); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := lookupAndDeleteBatch(m, &c, true, keys[:3], vals[:4]); err == nil {
		t.Error("buffers of different lengths taken")
	}
}

// TestProcsWriter writes an unwind_procs entry with the raw call and reads
// it back through cilium/ebpf's own lookup, field for field, then deletes
// it, twice.
func TestProcsWriter(t *testing.T) {
	bpftest.Require(t)
	procs := newProcsMap(t, 16)
	w := newProcsWriter(procs)
	if !w.raw {
		t.Fatalf("bpf.ProfileHsProc (%d bytes, %d without padding) is not written raw to a map of %d-byte values",
			unsafe.Sizeof(bpf.ProfileHsProc{}), binary.Size(bpf.ProfileHsProc{}), procs.ValueSize())
	}
	var want bpf.ProfileHsProc
	want.Mm, want.Count, want.Flags, want.Gen, want.PyRuntime, want.PyLayout = 0x7f00_1234_5000, 2, 1, 99, 0x55aa_0000_1000, 3
	want.M[0] = bpf.ProfileHsUmap{Start: 0x1000, End: 0x9000, Table: 7, Rows: 500, Bias: 0x400}
	want.M[1] = bpf.ProfileHsUmap{Start: 0xa000, End: 0xb000, Table: 8, Rows: 12, IndexPc: 0xa000, Buckets: 4, Shift: 10}
	const pid = 4242
	if err := w.put(pid, &want); err != nil {
		t.Fatal(err)
	}
	var got bpf.ProfileHsProc
	if err := procs.Lookup(uint32(pid), &got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("entry read back as %+v,\nwant %+v", got, want)
	}
	for range 2 {
		if err := w.delete(pid); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if err := procs.Lookup(uint32(pid), &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("entry still there after delete (%v)", err)
	}
}
