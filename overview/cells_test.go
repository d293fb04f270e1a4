package overview

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// alternatingNode records 80 s of 2 CPUs at 100 Hz from start into a new
// data directory as node: CPU 0 busy in the first 10 s of every 20 s, CPU
// 1 in the second, idle samples the rest.
func alternatingNode(t *testing.T, node string, start int64) string {
	t.Helper()
	opts := store.Options{Source: node, Node: node, PeriodNs: int64(10 * time.Millisecond), BlockDuration: 20 * time.Second}
	hot := []sample.Frame{{Function: "spin", Module: "/bin/spin", Kind: sample.KindUser}}
	idle := []sample.Frame{{Function: "default_idle", Module: "[kernel.kallsyms]", Kind: sample.KindKernel}}
	return storetest.Record(t, opts, func(add func(*sample.Sample)) {
		for off := int64(0); off < 80*int64(time.Second); off += int64(10 * time.Millisecond) {
			busy := uint32(off / int64(10*time.Second) % 2)
			for cpu := range uint32(2) {
				s := sample.Sample{Time: start + off, CPU: cpu, Comm: "swapper", Stack: idle}
				if cpu == busy {
					s = sample.Sample{Time: start + off, CPU: cpu, PID: 7, TID: 7, Comm: "spin", Stack: hot}
				}
				add(&s)
			}
		}
	})
}

// localBlocks lists the blocks of the data directory dir, failing t when
// there is none.
func localBlocks(t *testing.T, dir string) []store.LocalBlock {
	t.Helper()
	blocks, err := store.LocalBlocks(dir)
	if err != nil || len(blocks) == 0 {
		t.Fatalf("no block in %s: %v", dir, err)
	}
	return blocks
}

// TestWarmSteps: warming reads every block's per-CPU summary once, in the
// budget, after which an overview at the warmed step reads none (and
// answers as a cold one does); a query at another step does not evict the
// warm steps; a block that leaves its store takes its steps with it.
func TestWarmSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	const ms = int64(time.Millisecond)
	a := storetest.DutyNode(t, "node-a", nil, start, 60, 10*ms, []float64{1, 0.1})
	b := storetest.DutyNode(t, "node-b", nil, start, 60, 20*ms, []float64{0.4, 0.4, 0.4, 0.4})
	ctx := context.Background()
	step := int64(20 * time.Second)
	r := store.Range{From: start, To: start + 60*int64(time.Second)}
	cold := storetest.OpenDirs(t, a, b)
	want, _, err := cold.NodeCPUSteps(ctx, r, step, &store.Filter{}, NewCells(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	blocks := cold.Stats().Blocks
	if got := cold.Stats().CPUSummaryReads; got != uint64(blocks) || blocks < 4 {
		t.Fatalf("a cold overview read %d per-CPU summaries of %d blocks, want every one (at least 4 blocks)", got, blocks)
	}

	db, cells := storetest.OpenDirs(t, a, b), NewCells(0, 0)
	if st := cells.Stats(db); st.WarmBlocks != 0 || st.WarmPending != 0 || db.Stats().CPUSummaryReads != 0 {
		t.Fatalf("before warming: %+v, %d reads", st, db.Stats().CPUSummaryReads)
	}
	res, err := cells.WarmSteps(ctx, db, step)
	if err != nil || res.Warmed != blocks || res.Pending != 0 || res.Cached != 0 || res.Bytes <= 0 {
		t.Fatalf("warm: %+v, %v; want %d blocks warmed", res, err, blocks)
	}
	st := cells.Stats(db)
	if st.WarmBlocks != blocks || st.WarmPending != 0 || db.Stats().CPUSummaryReads != uint64(blocks) || st.WarmBytes != res.Bytes {
		t.Fatalf("after warming: %+v, %d reads; want %d warm, 0 pending, %d reads, %d bytes", st, db.Stats().CPUSummaryReads,
			blocks, blocks, res.Bytes)
	}
	got, _, err := db.NodeCPUSteps(ctx, r, step, &store.Filter{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	if reads := db.Stats().CPUSummaryReads; reads != uint64(blocks) {
		t.Fatalf("the first overview after warming read %d summaries more", reads-uint64(blocks))
	}
	if len(got) != len(want) {
		t.Fatalf("warm overview has %d nodes, cold %d", len(got), len(want))
	}
	for i := range want {
		if !storetest.SameNodeCPU(got[i], want[i]) {
			t.Errorf("node %s: warm %+v, cold %+v", want[i].Node, got[i], want[i])
		}
	}
	// Another step reads the summaries again, and leaves the warm steps.
	if _, _, err := db.NodeCPUSteps(ctx, r, step/2, &store.Filter{}, cells); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.NodeCPUSteps(ctx, r, step, &store.Filter{}, cells); err != nil {
		t.Fatal(err)
	}
	if reads := db.Stats().CPUSummaryReads; reads != 2*uint64(blocks) {
		t.Fatalf("after an overview at another step and one at the warm step: %d reads, want %d", reads, 2*blocks)
	}
	if res, err := cells.WarmSteps(ctx, db, step); err != nil || res.Warmed != 0 || res.Cached != blocks {
		t.Fatalf("warming again: %+v, %v; want every block already warm", res, err)
	}
	if _, err := cells.WarmSteps(ctx, db, 15*int64(time.Second)); err == nil {
		t.Fatal("a step that is not whole 10 s: no error")
	}

	// A budget of one byte warms one block and leaves the rest pending.
	small := NewCells(1, 0)
	res, err = small.WarmSteps(ctx, db, step)
	if err != nil || res.Warmed != 1 || res.Pending != blocks-1 {
		t.Fatalf("warm in a 1-byte budget: %+v, %v; want 1 warmed, %d pending", res, err, blocks-1)
	}
	if st := small.Stats(db); st.WarmBlocks != 1 || st.WarmPending != blocks-1 {
		t.Fatalf("stats after a 1-byte budget: %+v", st)
	}

	// Blocks that leave their store take their warm steps and a zoom's.
	if st := cells.Stats(db); st.StepBytes == 0 {
		t.Fatalf("no zoom's steps kept after an overview at %v: %+v", time.Duration(step/2), st)
	}
	for _, dir := range []string{a, b} {
		for _, b := range localBlocks(t, dir) {
			if err := os.RemoveAll(b.Dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().Blocks; n != 0 {
		t.Fatalf("%d blocks after their directories were removed", n)
	}
	if st := cells.Stats(db); st.WarmBytes != 0 || st.WarmBlocks != 0 || st.StepBytes != 0 {
		t.Fatalf("after every block left: %+v", st)
	}
}

// TestWarmStepsSkipsACorruptSummary: a block whose per-CPU summary is
// corrupt is counted as failed, not pending (warming is done), and no
// later pass reads it again; the overview still warns about it.
func TestWarmStepsSkipsACorruptSummary(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := storetest.DutyNode(t, "node-a", nil, start, 60, int64(10*time.Millisecond), []float64{1, 0.1})
	local := localBlocks(t, dir)
	if len(local) < 2 {
		t.Fatalf("blocks %v", local)
	}
	corruptCPUSummary(t, local[0].DataPath())

	db, cells := storetest.OpenDirs(t, dir), NewCells(0, 0)
	blocks := db.Stats().Blocks
	ctx := context.Background()
	step := int64(20 * time.Second)
	res, err := cells.WarmSteps(ctx, db, step)
	if err != nil || res.Failed != 1 || res.Warmed != blocks-1 || res.Pending != 0 {
		t.Fatalf("warm: %+v, %v; want 1 failed, %d warmed, 0 pending", res, err, blocks-1)
	}
	st := cells.Stats(db)
	if st.WarmPending != 0 || st.WarmBlocks != blocks-1 {
		t.Fatalf("stats: %+v; want 0 pending, %d warm", st, blocks-1)
	}
	reads := db.Stats().CPUSummaryReads
	res, err = cells.WarmSteps(ctx, db, step)
	if err != nil || res.Failed != 1 || res.Warmed != 0 || res.Cached != blocks-1 || db.Stats().CPUSummaryReads != reads {
		t.Fatalf("second pass: %+v, %v, %d reads more; want the corrupt block not read again", res, err, db.Stats().CPUSummaryReads-reads)
	}
	if _, warnings, err := db.NodeCPUSteps(ctx, store.Range{From: start, To: start + 60*int64(time.Second)}, step, &store.Filter{}, cells); err != nil || len(warnings) == 0 {
		t.Fatalf("overview over the corrupt block: %v, warnings %v", err, warnings)
	}
}

// corruptCPUSummary flips the last byte of the per-CPU summary section of
// the block data file at path: the section just before the table of
// contents, whose offset the trailer's first 8 bytes hold (store/FORMAT.md).
func corruptCPUSummary(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	trailer := make([]byte, 24)
	if _, err := f.ReadAt(trailer, fi.Size()-24); err != nil {
		t.Fatal(err)
	}
	at := int64(binary.LittleEndian.Uint64(trailer)) - 1
	if at <= 8 || at >= fi.Size() {
		t.Fatalf("%s: table of contents at %d", path, at+1)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// TestWarmStepsLeavesASparseBlockCold: an import whose few samples lie
// weeks apart would need dense warm steps over its whole span (a step
// each 10 s, mostly empty); warming leaves it to the queries, which read
// its steps over their own range, and does not count it as pending.
func TestWarmStepsLeavesASparseBlockCold(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", CallerTicks: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-60 * 24 * time.Hour).Truncate(time.Hour).UnixNano()
	g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 1, Stacks: 10})
	week := int64(7 * 24 * time.Hour)
	if _, err := db.Import("capture", int64(time.Second)/99, func(fn func(*sample.Sample) error) error {
		var s sample.Sample
		for i := int64(0); g.Next(&s); i++ {
			s.Time += i % 8 * week // eight bursts a week apart
			if err := fn(&s); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	step := int64(10 * time.Second)
	cells := NewCells(0, 0)
	res, err := cells.WarmSteps(ctx, db, step)
	if err != nil || res.Sparse != 1 || res.Warmed != 0 || res.Pending != 0 || res.Bytes != 0 {
		t.Fatalf("warm: %+v, %v; want the one block left cold as sparse, nothing pending", res, err)
	}
	if st := cells.Stats(db); st.WarmPending != 0 || st.WarmBlocks != 0 {
		t.Fatalf("after warming: %+v; want 0 warm, 0 pending", st)
	}
	// A query reads the block's steps over its own range.
	r := store.Range{From: start / step * step, To: (start/step + 100) * step}
	got, _, err := db.NodeCPUSteps(ctx, r, step, &store.Filter{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for _, n := range got {
		for _, c := range n.Samples {
			samples += c
		}
	}
	if samples == 0 {
		t.Fatalf("the overview of the first burst counted no sample: %+v", got)
	}
}

// TestCoarserFromWarmSteps: steps warmed at 10 s answer the overview at
// 20 s and 40 s without a read, equal to a cold answer and to a scan of
// the samples; and the busiest CPU of a coarse step is taken after its
// fine steps are summed per CPU: CPU 0 busy 10 s then CPU 1 busy 10 s is a
// busiest CPU busy half of a 20 s step, not all of it.
func TestCoarserFromWarmSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := alternatingNode(t, "node-a", start)
	ctx := context.Background()
	sec := int64(time.Second)
	warm, cells := storetest.OpenDirs(t, dir), NewCells(0, 0)
	if res, err := cells.WarmSteps(ctx, warm, 10*sec); err != nil || res.Warmed < 4 || res.Pending != 0 {
		t.Fatalf("warm: %+v, %v", res, err)
	}
	reads := warm.Stats().CPUSummaryReads
	r := store.Range{From: start, To: start + 80*sec}
	for _, step := range []int64{20 * sec, 40 * sec} {
		got, _, err := warm.NodeCPUSteps(ctx, r, step, &store.Filter{}, cells)
		if err != nil {
			t.Fatal(err)
		}
		if more := warm.Stats().CPUSummaryReads - reads; more != 0 {
			t.Errorf("step %ds from steps warm at 10 s: %d summaries read", step/sec, more)
		}
		cold, _, err := storetest.OpenDirs(t, dir).NodeCPUSteps(ctx, r, step, &store.Filter{}, NewCells(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		scan, _, err := storetest.OpenDirs(t, dir).NodeCPUSteps(ctx, r, step, &store.Filter{Frame: regexp.MustCompile(".")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !storetest.SameNodeCPU(got[0], cold[0]) || !storetest.NearNodeCPU(got[0], scan[0], int64(10*time.Millisecond), 2) {
			t.Fatalf("step %ds: from warm steps %+v, cold %+v, scan %+v", step/sec, got, cold, scan)
		}
		for s, ns := range got[0].BusiestNs {
			if ns != step/2 || got[0].TotalNs[s] != step {
				t.Errorf("step %ds, step %d: busiest CPU %d ns, total %d ns; want %d (half the step), %d", step/sec, s, ns,
					got[0].TotalNs[s], step/2, step)
			}
		}
	}
	// 30 s, another multiple of 10 s, reads nothing either.
	if _, _, err := warm.NodeCPUSteps(ctx, store.Range{From: start, To: start + 60*sec}, 30*sec, &store.Filter{}, cells); err != nil {
		t.Fatal(err)
	}
	if warm.Stats().CPUSummaryReads != reads {
		t.Error("30 s, a multiple of the warm 10 s, read summaries")
	}
}

// TestZoomStepsBounded: a zoom (a step finer than the warm one over part
// of the range) reads the summaries of the blocks it overlaps once, then
// answers from the zooms' steps; the steps cover the zoom's range only,
// and they hold at most the zoom budget: below the zoom's steps, the
// blocks evicted are read again.
func TestZoomStepsBounded(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := alternatingNode(t, "node-a", start)
	ctx := context.Background()
	sec := int64(time.Second)
	open := func(budget int64) (*store.Reader, *Cells) {
		db, cells := storetest.OpenDirs(t, dir), NewCells(0, budget)
		if _, err := cells.WarmSteps(ctx, db, 40*sec); err != nil {
			t.Fatal(err)
		}
		return db, cells
	}
	// The zoom: 20 s to 60 s at 10 s, over the 2 or 3 blocks it touches.
	zoom := store.Range{From: start + 20*sec, To: start + 60*sec}
	db, cells := open(0)
	reads := db.Stats().CPUSummaryReads
	want, _, err := db.NodeCPUSteps(ctx, zoom, 10*sec, &store.Filter{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	first := db.Stats().CPUSummaryReads - reads
	if first < 2 {
		t.Fatalf("the zoom read %d summaries, want those of the 2 or more blocks it overlaps", first)
	}
	entries, weight := cells.steps.Len(), cells.Stats(db).StepBytes
	if entries != int(first) || weight <= 0 || weight > DefaultStepBytes {
		t.Fatalf("zoom steps: %d entries, %d bytes; want %d, at most %d", entries, weight, first, DefaultStepBytes)
	}
	largest := int64(0)
	cells.steps.Range(func(_ stepsKey, s *store.CPUSteps) bool {
		// 4 steps of 2 CPUs at most: the zoom's range, not the block's.
		if s.Bytes() > int64(unsafe.Sizeof(store.CPUSteps{}))+4*(2+8) {
			t.Errorf("steps of %d bytes for a zoom of 4 steps of 2 CPUs", s.Bytes())
		}
		largest = max(largest, s.Bytes())
		return true
	})
	got, _, err := db.NodeCPUSteps(ctx, zoom, 10*sec, &store.Filter{}, cells)
	if err != nil || len(got) != 1 || !storetest.SameNodeCPU(got[0], want[0]) {
		t.Fatalf("the zoom again: %+v, %v; want %+v", got, err, want)
	}
	if more := db.Stats().CPUSummaryReads - reads - first; more != 0 {
		t.Errorf("the zoom again read %d summaries", more)
	}
	// A budget of one block's steps: one only is kept, and the zoom
	// again reads the blocks it evicted.
	small, smallCells := open(largest)
	if _, _, err := small.NodeCPUSteps(ctx, zoom, 10*sec, &store.Filter{}, smallCells); err != nil {
		t.Fatal(err)
	}
	if n, w := smallCells.steps.Len(), smallCells.Stats(small).StepBytes; n != 1 || w > largest {
		t.Errorf("in a budget of %d bytes: %d entries, %d bytes", largest, n, w)
	}
	reads = small.Stats().CPUSummaryReads
	if _, _, err := small.NodeCPUSteps(ctx, zoom, 10*sec, &store.Filter{}, smallCells); err != nil {
		t.Fatal(err)
	}
	if more := small.Stats().CPUSummaryReads - reads; more < first-1 {
		t.Errorf("the zoom again in a one-block budget read %d summaries, want at least %d", more, first-1)
	}
}

// TestTimelinesShareTheStepBudget: a store whose timelines keep their
// per-CPU steps in the overview's cells (Reader.KeepStepsIn,
// Cells.Timelines) answers as one that keeps its own, within the one
// budget of the zooms' steps: an overview that the timeline's steps serve
// reads no summary, a timeline and a zoom at steps that do not serve each
// other do not evict each other, and a budget of one block's steps keeps
// one block's, whoever read them.
func TestTimelinesShareTheStepBudget(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := alternatingNode(t, "node-a", start)
	ctx := context.Background()
	sec := int64(time.Second)
	all := store.Range{From: start, To: start + 80*sec}
	own := storetest.OpenDirs(t, dir)
	want, _, err := own.Timeline(ctx, all, 20*sec, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}

	db, cells := storetest.OpenDirs(t, dir), NewCells(0, 0)
	db.KeepStepsIn(cells.Timelines())
	blocks := uint64(db.Stats().Blocks)
	reads := func() uint64 { return db.Stats().CPUSummaryReads }
	timeline := func() {
		t.Helper()
		got, _, err := db.Timeline(ctx, all, 20*sec, &store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.CPUNs, want.CPUNs) || !slices.Equal(got.Samples, want.Samples) {
			t.Errorf("timeline through the cells %+v, want %+v", got, want)
		}
	}
	// The zoom: 20 s to 60 s at 10 s, over the 2 or 3 blocks it touches:
	// steps that serve no timeline of the whole range, at a step no
	// timeline's steps serve.
	zoom := store.Range{From: start + 20*sec, To: start + 60*sec}
	overview := func(r store.Range, step int64) {
		t.Helper()
		if _, _, err := Build(ctx, db, cells, Request{Range: r, Step: step, Filter: &store.Filter{}}); err != nil {
			t.Fatal(err)
		}
	}
	before := reads()
	timeline()
	if got := reads() - before; got != blocks || blocks < 2 {
		t.Fatalf("the timeline read %d summaries of %d blocks", got, blocks)
	}
	before = reads()
	overview(zoom, 10*sec)
	zoomed := reads() - before
	if zoomed < 2 {
		t.Fatalf("the zoom read %d summaries, want those of the 2 or more blocks it overlaps", zoomed)
	}
	for i, c := range []struct {
		what string
		do   func()
	}{
		{"the overview at 40 s, which the timeline's steps serve", func() { overview(all, 40*sec) }},
		{"the timeline again", timeline},
		{"the zoom again", func() { overview(zoom, 10*sec) }},
	} {
		before := reads()
		c.do()
		if got := reads() - before; got != 0 {
			t.Errorf("%d, %s: %d summaries read, want none", i, c.what, got)
		}
	}
	st := cells.Stats(db)
	if st.StepBytes <= 0 || st.StepLimit != DefaultStepBytes || st.WarmLimit != DefaultWarmBytes || cells.steps.Len() != int(blocks+zoomed) {
		t.Errorf("stats %+v with %d entries; want the timeline's steps of %d blocks and the zoom's of %d, within %d",
			st, cells.steps.Len(), blocks, zoomed, DefaultStepBytes)
	}

	// One budget: a timeline's steps count in it as a zoom's do.
	var largest int64
	cells.steps.Range(func(_ stepsKey, s *store.CPUSteps) bool { largest = max(largest, s.Bytes()); return true })
	small, smallCells := storetest.OpenDirs(t, dir), NewCells(0, largest)
	small.KeepStepsIn(smallCells.Timelines())
	if _, _, err := small.Timeline(ctx, all, 10*sec, &store.Filter{}); err != nil {
		t.Fatal(err)
	}
	if n, w := smallCells.steps.Len(), smallCells.Stats(small).StepBytes; n != 1 || w > largest {
		t.Errorf("a timeline in a budget of %d bytes: %d entries, %d bytes kept", largest, n, w)
	}
}
