package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// TestWarmCPUSteps: warming reads every block's per-CPU summary once, in
// the budget, after which an overview at the warmed step reads none (and
// answers as a cold one does); a query at another step does not evict the
// warm cells; a block that leaves the DB takes its cells with it.
func TestWarmCPUSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	const ms = int64(time.Millisecond)
	a := dutyNode(t, "node-a", nil, start, 60, 10*ms, []float64{1, 0.1})
	b := dutyNode(t, "node-b", nil, start, 60, 20*ms, []float64{0.4, 0.4, 0.4, 0.4})
	open := func(budget int64) *Reader {
		db, err := OpenReader([]BlockSource{DirSource(a), DirSource(b)}, ReaderOptions{IndexCacheBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	ctx := context.Background()
	step := int64(20 * time.Second)
	r := Range{From: start, To: start + 60*int64(time.Second)}
	cold := open(0)
	want, _, err := cold.NodeCPUSteps(ctx, r, step, &Filter{})
	if err != nil {
		t.Fatal(err)
	}
	blocks := cold.Stats().Blocks
	if got := cold.Stats().CPUSummaryReads; got != uint64(blocks) || blocks < 4 {
		t.Fatalf("a cold overview read %d per-CPU summaries of %d blocks, want every one (at least 4 blocks)", got, blocks)
	}

	db := open(0)
	if st := db.Stats(); st.OverviewWarmBlocks != 0 || st.OverviewWarmPending != 0 || st.CPUSummaryReads != 0 {
		t.Fatalf("before warming: %d warm, %d pending, %d reads", st.OverviewWarmBlocks, st.OverviewWarmPending, st.CPUSummaryReads)
	}
	res, err := db.WarmCPUSteps(ctx, step)
	if err != nil || res.Warmed != blocks || res.Pending != 0 || res.Cached != 0 || res.Bytes <= 0 {
		t.Fatalf("warm: %+v, %v; want %d blocks warmed", res, err, blocks)
	}
	st := db.Stats()
	if st.OverviewWarmBlocks != blocks || st.OverviewWarmPending != 0 || st.CPUSummaryReads != uint64(blocks) || st.OverviewWarmBytes != res.Bytes {
		t.Fatalf("after warming: %d warm, %d pending, %d reads, %d bytes; want %d, 0, %d, %d", st.OverviewWarmBlocks,
			st.OverviewWarmPending, st.CPUSummaryReads, st.OverviewWarmBytes, blocks, blocks, res.Bytes)
	}
	got, _, err := db.NodeCPUSteps(ctx, r, step, &Filter{})
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
		if !sameNodeCPU(got[i], want[i]) {
			t.Errorf("node %s: warm %+v, cold %+v", want[i].Node, got[i], want[i])
		}
	}
	// Another step reads the summaries again, and leaves the warm cells.
	if _, _, err := db.NodeCPUSteps(ctx, r, step/2, &Filter{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.NodeCPUSteps(ctx, r, step, &Filter{}); err != nil {
		t.Fatal(err)
	}
	if reads := db.Stats().CPUSummaryReads; reads != 2*uint64(blocks) {
		t.Fatalf("after an overview at another step and one at the warm step: %d reads, want %d", reads, 2*blocks)
	}
	if res, err := db.WarmCPUSteps(ctx, step); err != nil || res.Warmed != 0 || res.Cached != blocks {
		t.Fatalf("warming again: %+v, %v; want every block already warm", res, err)
	}
	if _, err := db.WarmCPUSteps(ctx, 15*int64(time.Second)); err == nil {
		t.Fatal("a step that is not whole 10 s: no error")
	}

	// A budget of one byte warms one block and leaves the rest pending.
	small := open(1)
	res, err = small.WarmCPUSteps(ctx, step)
	if err != nil || res.Warmed != 1 || res.Pending != blocks-1 {
		t.Fatalf("warm in a 1-byte budget: %+v, %v; want 1 warmed, %d pending", res, err, blocks-1)
	}
	if st := small.Stats(); st.OverviewWarmBlocks != 1 || st.OverviewWarmPending != blocks-1 {
		t.Fatalf("stats after a 1-byte budget: %d warm, %d pending", st.OverviewWarmBlocks, st.OverviewWarmPending)
	}

	// Blocks that leave take their warm cells.
	db.mu.Lock()
	gone := db.blocks
	db.blocks = nil
	db.mu.Unlock()
	for _, b := range gone {
		db.retire(b)
	}
	if st := db.Stats(); st.OverviewWarmBytes != 0 || st.OverviewWarmBlocks != 0 {
		t.Fatalf("after every block left: %d bytes, %d blocks warm", st.OverviewWarmBytes, st.OverviewWarmBlocks)
	}
}

// TestWarmCPUStepsSkipsACorruptSummary: a block whose per-CPU summary is
// corrupt is counted as failed, not pending (warming is done), and no
// later pass reads it again.
func TestWarmCPUStepsSkipsACorruptSummary(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := dutyNode(t, "node-a", nil, start, 60, int64(10*time.Millisecond), []float64{1, 0.1})
	db, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	blocks := len(db.blocks)
	victim := db.blocks[0]
	at := victim.sections[sectionCPUSummary].offset
	path := filepath.Join(victim.Dir, BlockDataFile)
	db.Close()
	if blocks < 2 || at == 0 {
		t.Fatalf("%d blocks, summary at %d", blocks, at)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()

	db, err = Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	step := int64(20 * time.Second)
	res, err := db.WarmCPUSteps(ctx, step)
	if err != nil || res.Failed != 1 || res.Warmed != blocks-1 || res.Pending != 0 {
		t.Fatalf("warm: %+v, %v; want 1 failed, %d warmed, 0 pending", res, err, blocks-1)
	}
	st := db.Stats()
	if st.OverviewWarmPending != 0 || st.OverviewWarmBlocks != blocks-1 {
		t.Fatalf("stats: %d pending, %d warm; want 0, %d", st.OverviewWarmPending, st.OverviewWarmBlocks, blocks-1)
	}
	res, err = db.WarmCPUSteps(ctx, step)
	if err != nil || res.Failed != 1 || res.Warmed != 0 || res.Cached != blocks-1 || db.Stats().CPUSummaryReads != st.CPUSummaryReads {
		t.Fatalf("second pass: %+v, %v, %d reads more; want the corrupt block not read again", res, err, db.Stats().CPUSummaryReads-st.CPUSummaryReads)
	}
	// The overview still warns about it.
	if _, warnings, err := db.NodeCPUSteps(ctx, Range{From: start, To: start + 60*int64(time.Second)}, step, &Filter{}); err != nil || len(warnings) == 0 {
		t.Fatalf("overview over the corrupt block: %v, warnings %v", err, warnings)
	}
}

// TestWarmCPUStepsLeavesASparseBlockCold: an import whose few samples lie
// weeks apart would need dense warm cells over its whole span (a step
// each 10 s, mostly empty); warming leaves it to the queries, which read
// its cells over their own range, and does not count it as pending.
func TestWarmCPUStepsLeavesASparseBlockCold(t *testing.T) {
	db, err := Open(t.TempDir(), Options{Source: "host", CallerTicks: true})
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
	res, err := db.WarmCPUSteps(ctx, step)
	if err != nil || res.Sparse != 1 || res.Warmed != 0 || res.Pending != 0 || res.Bytes != 0 {
		t.Fatalf("warm: %+v, %v; want the one block left cold as sparse, nothing pending", res, err)
	}
	if st := db.Stats(); st.OverviewWarmPending != 0 || st.OverviewWarmBlocks != 0 {
		t.Fatalf("after warming: %d warm, %d pending; want 0 and 0", st.OverviewWarmBlocks, st.OverviewWarmPending)
	}
	// A query reads the block's cells over its own range.
	r := Range{From: start / step * step, To: (start/step + 100) * step}
	got, _, err := db.NodeCPUSteps(ctx, r, step, &Filter{})
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
