package store

import (
	"slices"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// pythonFramesOf counts the Python frames of samples, and those with
// both lines known.
func pythonFramesOf(samples []sample.Sample) (frames, withLines int) {
	for _, s := range samples {
		for _, f := range s.Stack {
			if f.Kind == sample.KindPython {
				frames++
				if f.Line != 0 && f.StartLine != 0 {
					withLines++
				}
			}
		}
	}
	return frames, withLines
}

// TestPythonFramesRoundTrip: Python frames (kind, qualified name, file,
// line and first line) read back the same from the head, from blocks cut
// from it, from the WAL after a crash and from a compacted block; a
// function run at several lines is a frame of the tables per line, of one
// function.
func TestPythonFramesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 45, Stacks: 60, Python: true, Unwind: true})
	if n, lines := pythonFramesOf(want); n == 0 || lines != n {
		t.Fatalf("the samples have %d Python frames, %d with lines: the test needs them all with lines", n, lines)
	}
	ix := roundTrip(t, db, dir, want)
	linesOf := map[string]map[uint32]bool{}
	for _, f := range ix.tables.Frames {
		if f.Kind != sample.KindPython {
			continue
		}
		fn := ix.tables.Strings[f.Function]
		if linesOf[fn] == nil {
			linesOf[fn] = map[uint32]bool{}
		}
		if linesOf[fn][f.Line] {
			t.Errorf("Python frame %s line %d interned twice", fn, f.Line)
		}
		linesOf[fn][f.Line] = true
	}
	several := 0
	for _, lines := range linesOf {
		if len(lines) > 1 {
			several++
		}
	}
	if len(linesOf) == 0 || several == 0 {
		t.Errorf("Python functions and their lines in the compacted block: %v, want some at several lines", linesOf)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBuilderKeepsLinesApart: stacks that differ only in a Python frame's
// line are two stacks, and the fast path (a stack seen before) does not
// mix them up.
func TestBuilderKeepsLinesApart(t *testing.T) {
	stack := []sample.Frame{{Function: "Model.forward", Module: "/srv/model.py", Kind: sample.KindPython, Line: 10, StartLine: 8},
		{Function: "main", Module: "/usr/bin/python3.11", Address: 0x20, Kind: sample.KindUser}}
	b := NewBuilder()
	var lines []uint32
	for i := range 6 {
		st := slices.Clone(stack)
		st[0].Line = 10 + uint32(i%3)
		lines = append(lines, st[0].Line)
		b.Append(&sample.Sample{Time: int64(i+1) * 1e6, Comm: "python3", Stack: st})
	}
	if len(b.T.Frames) != 4 || b.T.NumStacks() != 3 {
		t.Errorf("%d frames and %d stacks, want 4 frames (forward at three lines) and 3 stacks", len(b.T.Frames), b.T.NumStacks())
	}
	for i, line := range lines {
		if got := b.T.Sample(i).Stack[0]; got.Line != line || got.StartLine != 8 || got.Kind != sample.KindPython {
			t.Errorf("sample %d: leaf %+v, want Model.forward at line %d from line 8", i, got, line)
		}
	}
}

// TestVersion5DataStillReads opens a data directory written by format
// version 5 (testdata/v5: a block and a WAL segment a crash left, frames
// marked with how they were found): its samples read back whole, no frame
// Python or with lines, the methods kept, and the WAL is replayed into a
// block of this version.
func TestVersion5DataStillReads(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/v5", dir)
	// The configs that wrote testdata/v5: one block, then a WAL.
	_, want := synthTable(t, synth.Config{CPUs: 2, Hz: 99, Start: 1_700_000_000_000_000_000, Seconds: 3, Stacks: 20, Processes: 8, Unwind: true})
	_, wal := synthTable(t, synth.Config{CPUs: 2, Hz: 99, Start: 1_700_000_010_000_000_000, Seconds: 2, Stacks: 10, Processes: 4, Unwind: true})
	want = append(want, wal...)
	sortSamples(want)

	db, err := Open(dir, Options{Source: "v5host", Node: "v5node"})
	if err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.CorruptSkips != 0 {
		t.Fatalf("corrupt skips opening version 5 data: %+v", st)
	}
	got := all(t, db, Filter{})
	sameSamples(t, got, want)
	if table, fp := methodsOf(got); table == 0 || fp == 0 {
		t.Errorf("version 5 data read back with %d frames found with tables and %d with frame pointers, want both", table, fp)
	}
	if n, _ := pythonFramesOf(got); n != 0 {
		t.Errorf("version 5 data read back with %d Python frames", n)
	}
	versions := map[int]int{}
	for _, b := range db.blocks {
		versions[b.Meta.Version]++
	}
	if versions[5] != 1 || versions[FormatVersion] != 1 || FormatVersion != 6 {
		t.Errorf("block versions %v, want the version 5 block and the WAL replayed into a version %d one", versions, FormatVersion)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
