package store

import (
	"cmp"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// TestCompactionReadsOneParentAtATime checks that a compaction of blocks
// that follow one another in time holds one parent's index at a time (two
// where their edges overlap), not all of them: the merge's memory must not
// grow with its parents.
func TestCompactionReadsOneParentAtATime(t *testing.T) {
	db, want := sealedBlocks(t, synth.Config{Seconds: 300, Stacks: 100})
	before := db.Stats().Blocks
	// Consecutive blocks may overlap by a few microseconds: the CPUs'
	// samples reach the head slightly out of order, so a cut can put a
	// sample just earlier than the last one of a block into the next.
	// Where two parents overlap both are open; never more than overlap.
	depth := overlapDepth(db.blocks)
	if depth > 2 {
		t.Fatalf("sealed blocks overlap %d deep; the test wants consecutive blocks", depth)
	}
	db.Maintain()
	st := db.Stats()
	if st.Compactions == 0 || st.Blocks >= before {
		t.Fatalf("%d compactions, %d blocks of %d: nothing merged", st.Compactions, st.Blocks, before)
	}
	if peak := db.mergePeakOpen.Load(); peak < 1 || int(peak) > depth {
		t.Fatalf("a compaction of %d consecutive blocks (overlapping at most %d deep) held %d parents open at once", before, depth, peak)
	}
	sameSamples(t, all(t, db, Filter{}), want)
}

// TestMergeOfOverlappingParents checks that parents whose times overlap
// (after a restart or an import) are merged together, each opened once
// the merge reaches its first sample, and that every sample is kept.
func TestMergeOfOverlappingParents(t *testing.T) {
	const start = 1_700_000_000_000_000_000
	dir := t.TempDir()
	var blocks []*Block
	var want []sample.Sample
	// Two blocks over the same 60 s, then one after them.
	for i, cfg := range []synth.Config{
		{Seed: 1, Start: start, Seconds: 60},
		{Seed: 2, Start: start + 1e9/2, Seconds: 60},
		{Seed: 3, Start: start + 100e9, Seconds: 30},
	} {
		cfg.CPUs, cfg.Hz, cfg.Stacks = 2, 99, 40
		tab, samples := synthTable(t, cfg)
		meta, err := writeBlock(dir, Meta{Source: "host"}, tab)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		b, err := openBlock(filepath.Join(dir, meta.ID))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		blocks = append(blocks, b)
		want = append(want, samples...)
	}
	out := t.TempDir()
	var peak int
	meta, err := writeBlockFrom(out, Meta{Source: "host", Level: 1}, nil, func(w *blockWriter) (err error) {
		peak, err = mergeInTimeOrder([]*Block{blocks[2], blocks[1], blocks[0]}, w)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak != 2 {
		t.Errorf("held %d parents open at once, want 2 (two overlap, the third follows)", peak)
	}
	merged, err := openBlock(filepath.Join(out, meta.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Close()
	got := readAll(t, merged)
	sortSamples(got)
	sortSamples(want)
	sameSamples(t, got, want)
}

// overlapDepth is the largest number of blocks whose [MinTime, MaxTime]
// spans share an instant.
func overlapDepth(blocks []*Block) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, b := range blocks {
		edges = append(edges, edge{b.Meta.MinTime, +1}, edge{b.Meta.MaxTime, -1})
	}
	// At equal times a start comes before an end: touching spans count
	// as overlapping, as the merge may open both.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(b.delta, a.delta)
	})
	depth, deepest := 0, 0
	for _, e := range edges {
		depth += e.delta
		deepest = max(deepest, depth)
	}
	return deepest
}

// TestBuilderKeepsNoCallerString checks that a table keeps copies of the
// strings it is given, not the strings themselves: a function name may be
// a slice of a whole symbol table, which must be freed once the
// symbolizer's cache evicts it, while the head that named it lives on.
func TestBuilderKeepsNoCallerString(t *testing.T) {
	b := NewBuilder()
	freed := make(chan struct{})
	func() {
		var table strings.Builder
		for i := range 10_000 {
			fmt.Fprintf(&table, "function_%d", i)
		}
		names := table.String()
		runtime.AddCleanup(unsafe.StringData(names), func(ch chan struct{}) { close(ch) }, freed)
		s := sample.Sample{Time: 1, PID: 1, TID: 1, Comm: "c", Stack: []sample.Frame{
			{Function: names[:10], Module: "/bin/c", Kind: sample.KindUser, Address: 1},
		}}
		b.Append(&s)
		b.Append(&s) // found again by the frame's key
	}()
	for range 10 {
		runtime.GC()
		select {
		case <-freed:
			if got := b.T.Sample(1).Stack[0].Function; got != "function_0" {
				t.Fatalf("the table's frame is named %q, want function_0", got)
			}
			if len(b.T.Frames) != 1 {
				t.Fatalf("%d frames for one", len(b.T.Frames))
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("the string a frame's name was sliced from is still in memory: the table keeps it")
}

// TestMergeRun: the first run of two or more consecutive blocks within the
// limit in every measure; a block over the limit alone is left out.
func TestMergeRun(t *testing.T) {
	limit := MergeSize{Bytes: 100, Samples: 100, IndexBytes: 100}
	idx := func(n ...int64) []MergeSize {
		s := make([]MergeSize, len(n))
		for i, v := range n {
			s[i] = MergeSize{IndexBytes: v}
		}
		return s
	}
	for _, c := range []struct {
		name       string
		sizes      []MergeSize
		start, end int
	}{
		{"none", nil, 0, 0},
		{"one block", idx(10), 0, 0},
		{"the whole window", idx(10, 20, 30, 40), 0, 4},
		{"exactly the limit", idx(50, 50), 0, 2},
		{"runs within the limit", idx(40, 40, 40, 40), 0, 2},
		{"a block over the limit alone", idx(150, 30, 30), 1, 3},
		{"a run before a large block", idx(30, 30, 90, 5), 0, 2},
		{"no two fit", idx(60, 60, 60), 0, 0},
		{"samples", []MergeSize{{Samples: 60}, {Samples: 30}, {Samples: 30}}, 0, 2},
		{"data bytes", []MergeSize{{Bytes: 90}, {Bytes: 20}, {Bytes: 20}}, 1, 3},
	} {
		if start, end := MergeRun(c.sizes, limit); start != c.start || end != c.end {
			t.Errorf("%s: MergeRun(%v) = [%d:%d], want [%d:%d]", c.name, c.sizes, start, end, c.start, c.end)
		}
	}
}
