package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// crashCopy flushes db's log and opens a copy of its directory as an
// agent that crashed at that moment would find it: the WAL replayed. It
// waits for the blocks being written first: a copy taken file by file
// while one is renamed into place and its WAL segments removed is a state
// no crash leaves (the block's directory missed, the WAL already gone).
func crashCopy(t *testing.T, db *DB, dir string) *DB {
	t.Helper()
	waitSealed(t, db)
	db.Flush()
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	os.Remove(filepath.Join(crashed, "lock"))
	replayed, err := Open(crashed, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	return replayed
}

// appendMarked appends cfg's samples with their frames marked
// (synth.Config.Unwind).
func appendMarked(t testing.TB, db *DB, cfg synth.Config) []sample.Sample {
	t.Helper()
	cfg.Unwind = true
	return appendSynth(t, db, cfg)
}

// methodsOf counts the marked frames of samples.
func methodsOf(samples []sample.Sample) (table, fp int) {
	for _, s := range samples {
		for _, f := range s.Stack {
			switch f.Method {
			case sample.MethodTable:
				table++
			case sample.MethodFP:
				fp++
			}
		}
	}
	return table, fp
}

// roundTrip checks that db's samples are want, as its head and the
// blocks cut from it hold them, as a crash's WAL replays them (a copy of
// dir), and after compaction merges the blocks; it returns the index of
// the merged block (of this format's version) for the tables' checks.
func roundTrip(t *testing.T, db *DB, dir string, want []sample.Sample) *blockIndex {
	t.Helper()
	sameSamples(t, all(t, db, Filter{}), want)
	if db.Stats().Cuts == 0 {
		t.Error("no block was cut: the blocks are not tested")
	}

	// A crash: the WAL holds what the head had.
	replayed := crashCopy(t, db, dir)
	sameSamples(t, all(t, replayed, Filter{}), want)
	if err := replayed.Close(); err != nil {
		t.Fatal(err)
	}

	// Compaction merges the blocks.
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	before := db.Stats().Blocks
	db.Maintain()
	if st := db.Stats(); st.Compactions == 0 || st.Blocks >= before {
		t.Fatalf("compaction did not merge the %d blocks: %+v", before, st)
	}
	sameSamples(t, all(t, db, Filter{}), want)

	db.mu.RLock()
	merged := db.blocks[len(db.blocks)-1]
	db.mu.RUnlock()
	if merged.Meta.Version != FormatVersion {
		t.Errorf("compacted block of version %d, want %d", merged.Meta.Version, FormatVersion)
	}
	ix, err := merged.readIndex()
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// TestFrameMethodsRoundTrip: how each frame was found reads back the same
// from the head, from blocks cut from it, from the WAL after a crash and
// from a compacted block; a frame reached both ways is two frames of the
// tables, of one function.
func TestFrameMethodsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	want := appendMarked(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 45, Stacks: 50})
	table, fp := methodsOf(want)
	if table == 0 || fp == 0 {
		t.Fatalf("the samples have %d frames found with tables and %d with frame pointers: the test needs both", table, fp)
	}
	// The head, a crash's WAL and a compacted block; one frame of the
	// tables per (address, method), one function.
	ix := roundTrip(t, db, dir, want)
	frames, funcs := ix.tables.Frames, ix.tables.Strings
	type at struct {
		fn   string
		addr uint64
	}
	ways := map[at]map[sample.Method]bool{}
	for _, f := range frames {
		k := at{funcs[f.Function], f.Address}
		if ways[k] == nil {
			ways[k] = map[sample.Method]bool{}
		}
		if ways[k][f.Method] {
			t.Errorf("frame %s at %#x method %d interned twice", k.fn, k.addr, f.Method)
		}
		ways[k][f.Method] = true
	}
	both := 0
	for _, m := range ways {
		if m[sample.MethodTable] && m[sample.MethodFP] {
			both++
		}
	}
	if both == 0 {
		t.Error("no address of the compacted block was reached both ways")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVersion4DataStillReads opens a data directory written by format
// version 4 (testdata/v4: a block and a WAL segment a crash left): its
// samples read back whole, every frame's method not known, and the WAL
// is replayed into a block of this version.
func TestVersion4DataStillReads(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/v4", dir)
	// The configs that wrote testdata/v4: one block, then a WAL.
	_, want := synthTable(t, synth.Config{CPUs: 2, Hz: 99, Start: 1_700_000_000_000_000_000, Seconds: 3, Stacks: 20, Processes: 8})
	_, wal := synthTable(t, synth.Config{CPUs: 2, Hz: 99, Start: 1_700_000_010_000_000_000, Seconds: 2, Stacks: 10, Processes: 4})
	want = append(want, wal...)
	sortSamples(want)

	db, err := Open(dir, Options{Source: "v4host", Node: "v4node"})
	if err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.CorruptSkips != 0 {
		t.Fatalf("corrupt skips opening version 4 data: %+v", st)
	}
	got := all(t, db, Filter{})
	sameSamples(t, got, want)
	if table, fp := methodsOf(got); table+fp != 0 {
		t.Errorf("version 4 data read back with %d frames found with tables and %d with frame pointers, want none", table, fp)
	}
	versions := map[int]int{}
	for _, b := range db.blocks {
		versions[b.Meta.Version]++
	}
	if versions[4] != 1 || versions[FormatVersion] != 1 || FormatVersion != 6 {
		t.Errorf("block versions %v, want the version 4 block and the WAL replayed into a version %d one", versions, FormatVersion)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFrameKindByteRefused: a kind byte this version does not define (a
// kind a newer heatscope wrote, a bit no version has) is a clear error
// naming it, in a block's frames section and in the WAL, and so are a
// version 4 block's frame marked with a method and a version 5 block's
// Python frame or lines.
func TestFrameKindByteRefused(t *testing.T) {
	frames := func(kind byte) []byte {
		b := binary.AppendUvarint(nil, 1)
		b = binary.AppendUvarint(append(append(b, 0, 0, 0), kind), 0x401000)
		if kind&kindLines != 0 {
			b = append(b, 42, 40) // line 42 of a function from line 40
		}
		return b
	}
	sections := func(kind byte) [numSections + 1][]byte {
		var raw [numSections + 1][]byte
		raw[sectionStrings] = encodeStrings(&Table{Strings: []string{""}})
		raw[sectionFrames] = frames(kind)
		raw[sectionStacks] = []byte{0}
		raw[sectionThreads] = []byte{0}
		return raw
	}
	for _, tc := range []struct {
		kind    byte
		version int
		want    string // "" for no error
		method  sample.Method
	}{
		{2, 4, "", sample.MethodNotKnown},
		{2 | kindFoundTable, 5, "", sample.MethodTable},
		{3 | kindFoundFP, 5, "", sample.MethodFP},
		{0 | kindFoundFP, 5, "", sample.MethodFP},
		{2 | kindFoundFP, 4, "frame kind byte 0x82: a frame marked with how it was found in a block older than format version 5", 0},
		{2 | kindFoundFP | kindFoundTable, 5, "frame kind byte 0xc2: bits this heatscope does not know", 0},
		{0x08, 6, "frame kind byte 0x08: bits this heatscope does not know", 0},
		{0x10, 6, "frame kind byte 0x10: bits this heatscope does not know", 0},
		{1 | kindFoundTable, 5, "frame kind byte 0x41: a kernel frame marked with how it was found", 0},
		{byte(sample.KindPython), 6, "", sample.MethodNotKnown},
		{byte(sample.KindPython) | kindLines, 6, "", sample.MethodNotKnown},
		{2 | kindLines | kindFoundTable, 6, "", sample.MethodTable},
		{byte(sample.KindPython), 5, "frame kind byte 0x04: a Python frame or a frame with source lines in a block older than format version 6", 0},
		{2 | kindLines, 5, "frame kind byte 0x22: a Python frame or a frame with source lines in a block older than format version 6", 0},
		{0x05, 6, "frame kind byte 0x05: frame kind 5, which this heatscope (format version 6) does not know: a newer heatscope wrote it", 0},
		{0x07 | kindLines, 6, "frame kind byte 0x27: frame kind 7, which this heatscope", 0},
	} {
		tab, err := decodeTables(sections(tc.kind), tc.version)
		if tc.want == "" {
			if err != nil || tab.Frames[0].Method != tc.method || tab.Frames[0].Kind != sample.Kind(tc.kind&kindBits) {
				t.Errorf("kind byte %#x in version %d: %v, frames %+v, want kind %d method %d", tc.kind, tc.version, err, tab, tc.kind&kindBits, tc.method)
				continue
			}
			f := tab.Frames[0]
			if wantLines := tc.kind&kindLines != 0; f.Address != 0x401000 || wantLines != (f.Line == 42 && f.StartLine == 40) || !wantLines && f.Line+f.StartLine != 0 {
				t.Errorf("kind byte %#x in version %d: frame %+v, want address 0x401000 and lines 42 and 40 when bit 5 is set", tc.kind, tc.version, f)
			}
			continue
		}
		if err == nil || !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kind byte %#x in version %d: error %v, want %q", tc.kind, tc.version, err, tc.want)
		}
		if strings.Contains(tc.want, "older than format version") {
			continue // a WAL is read as this version's
		}
		// The same frame in a WAL page.
		page := append([]byte{recFrame}, frames(tc.kind)[1:]...)
		var seg []byte
		seg = binary.LittleEndian.AppendUint32(seg, uint32(len(page)))
		seg = binary.LittleEndian.AppendUint32(seg, crc32.Checksum(page, castagnoli))
		seg = append(seg, page...)
		b := NewBuilder()
		if err := replayPages(bytes.NewReader(seg), b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kind byte %#x in a WAL: error %v, want %q", tc.kind, err, tc.want)
		}
		if len(b.T.Frames) != 0 {
			t.Errorf("kind byte %#x in a WAL: %d frames replayed", tc.kind, len(b.T.Frames))
		}
	}
}

// TestBuilderKeepsMethodsApart: stacks that differ only in how a frame
// was found are two stacks, and the fast path (a stack seen before) does
// not mix them up.
func TestBuilderKeepsMethodsApart(t *testing.T) {
	stack := []sample.Frame{{Function: "leaf", Module: "/bin/a", Address: 0x10, Kind: sample.KindUser},
		{Function: "main", Module: "/bin/a", Address: 0x20, Kind: sample.KindUser}}
	b := NewBuilder()
	var order []sample.Method
	for i := range 6 {
		st := slices.Clone(stack)
		st[1].Method = []sample.Method{sample.MethodNotKnown, sample.MethodTable, sample.MethodFP}[i%3]
		order = append(order, st[1].Method)
		b.Append(&sample.Sample{Time: int64(i+1) * 1e6, Comm: "a", Stack: st})
	}
	if len(b.T.Frames) != 4 || b.T.NumStacks() != 3 {
		t.Errorf("%d frames and %d stacks, want 4 frames (main three ways) and 3 stacks", len(b.T.Frames), b.T.NumStacks())
	}
	for i, m := range order {
		if got := b.T.Sample(i).Stack[1].Method; got != m {
			t.Errorf("sample %d: main's method %d, want %d", i, got, m)
		}
	}
}

// TestKernelFrameMethodDropped appends a sample whose kernel frame says it
// was found with a table (what a crafted import could hand the store):
// the store keeps the sample, drops the kernel frame's method, and reads
// it back from the head, from the WAL after a crash and from a block
// without a corrupt block or segment.
func TestKernelFrameMethodDropped(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := sample.Sample{Time: time.Now().Add(-time.Hour).UnixNano() / 1000 * 1000, PID: 7, TID: 7, CPU: 0, Comm: "app",
		Stack: []sample.Frame{
			{Function: "leaf", Module: "/bin/app", Address: 0x10, Kind: sample.KindUser},
			{Function: "do_syscall_64", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel, Method: sample.MethodTable},
			{Function: "main", Module: "/bin/app", Address: 0x40, Kind: sample.KindUser, Method: sample.MethodFP},
		}}
	if err := db.Append(&s); err != nil {
		t.Fatal(err)
	}
	check := func(where string, got []sample.Sample) {
		t.Helper()
		if len(got) != 1 {
			t.Fatalf("%s: %d samples, want 1", where, len(got))
		}
		if m := []sample.Method{got[0].Stack[0].Method, got[0].Stack[1].Method, got[0].Stack[2].Method}; !slices.Equal(m, []sample.Method{sample.MethodNotKnown, sample.MethodNotKnown, sample.MethodFP}) {
			t.Errorf("%s: methods %v, want the kernel frame's dropped and main's kept", where, m)
		}
	}
	check("head", all(t, db, Filter{}))
	replayed := crashCopy(t, db, dir)
	check("WAL replay", all(t, replayed, Filter{}))
	replayed.Close()
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	check("block", all(t, db, Filter{}))
	if st := db.Stats(); st.CorruptSkips != 0 {
		t.Errorf("%d corrupt blocks skipped", st.CorruptSkips)
	}
}
