package store

import (
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/heappeak"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// churnWindow appends to db a 2-hour window of 2-minute blocks as an agent
// under heavy process churn records them: every sample is a thread never
// seen before (its own pid, command and cgroup) on a stack never seen
// before (its own leaf frame under a few shared callers), perBlock samples
// a block (synth.ChurnSample). Each block is cut and written before the
// next. It returns the end of the window.
func churnWindow(t *testing.T, db *DB, start time.Time, blocks, perBlock int) time.Time {
	t.Helper()
	block := db.opts.BlockDuration
	pid := uint32(100_000)
	callers := synth.ChurnCallers(16)
	for i := range blocks {
		t0 := start.Add(time.Duration(i) * block)
		for j := range perBlock {
			pid++
			s := synth.ChurnSample(pid, t0.Add(time.Duration(j)*block/time.Duration(perBlock)).UnixNano(), callers[:4+j%12])
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
		db.mu.Lock()
		db.cutLocked()
		db.mu.Unlock()
		awaitSealed(t, db)
	}
	return start.Add(time.Duration(blocks) * block)
}

// TestTwoHourMergeUnderChurnIsBounded compacts a 2-hour window of 2-minute
// blocks recorded under heavy churn, as the recorder's compaction does,
// and checks the peak heap of its merges: bounded by a constant, whatever
// the window's threads and stacks (the 2-hour soak's 488.5 MB spike, issue
// 14). Merging the whole window into one block, as compaction did, took
// 116 to 127 MB here, and more with more threads or stacks.
func TestTwoHourMergeUnderChurnIsBounded(t *testing.T) {
	const (
		block    = 2 * time.Minute
		blocks   = 60 // a 2-hour window
		perBlock = 3000
		// A merge takes on at most MaxMergedIndexBytes of index and
		// holds about ten times that at peak (40 to 44 MB measured).
		peakBound = 16 * MaxMergedIndexBytes
	)
	db, err := Open(memDir(t), Options{Source: "node", PeriodNs: int64(time.Second / 99), BlockDuration: block, CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-6 * time.Hour).Truncate(2 * time.Hour)
	end := churnWindow(t, db, start, blocks, perBlock)
	var indexBytes int64
	db.mu.RLock()
	for _, b := range db.blocks {
		indexBytes += b.indexBytes()
	}
	db.mu.RUnlock()
	if before := db.Stats().Blocks; before != blocks || indexBytes < 2*MaxMergedIndexBytes {
		t.Fatalf("%d blocks with %d bytes of index, want %d blocks with at least twice the merge bound: the test would test nothing", before, indexBytes, blocks)
	}
	peak := heappeak.During(func() { db.maintainAt(end.Add(block)) })
	st := db.Stats()
	t.Logf("%d blocks of %d samples, their index sections %.1f MB uncompressed: %d compactions, %d blocks after; peak heap of the merges %.1f MB (bound %.0f MB)",
		blocks, perBlock, mb(uint64(indexBytes)), st.Compactions, st.Blocks, mb(peak), mb(peakBound))
	samples := 0
	db.mu.RLock()
	for _, b := range db.blocks {
		samples += b.Meta.Samples
	}
	db.mu.RUnlock()
	if samples != blocks*perBlock {
		t.Fatalf("%d samples in the blocks after compaction, want %d", samples, blocks*perBlock)
	}
	// Runs of consecutive blocks, each within the bound: the fewest blocks
	// the bound allows, give or take one.
	if most := int(2*indexBytes/MaxMergedIndexBytes) + 1; st.Compactions < 2 || st.Blocks > most {
		t.Errorf("%d compactions left %d blocks, want runs within the bound: 2 compactions or more, at most %d blocks for %d bytes of index", st.Compactions, st.Blocks, most, indexBytes)
	}
	if peak > peakBound {
		t.Errorf("the merges of a 2-hour window under churn took %.1f MB of heap at peak, want at most %.0f MB", mb(peak), mb(peakBound))
	}
}

// TestHeadWriteUnderChurnIsBounded writes a 2-minute head of 24 000
// threads, each a process of its own (what 2 CPUs at 99 Hz sample in 2
// minutes of churn), and checks what writing it takes beyond the head:
// the sealed head kept a pointer into its Builder, and with it the
// interning maps, while the block writer built its own tables beside
// them (10.5 to 12.6 MB above a 9.0 MB head). Now the sealed head keeps
// its tables only (3.7 to 5.3 MB), and the writer writes them as they are
// (0 to 4.1 MB, with the head's maps collected meanwhile).
func TestHeadWriteUnderChurnIsBounded(t *testing.T) {
	const threads = 24_000
	db, err := Open(memDir(t), Options{Source: "node", PeriodNs: int64(time.Second / 99), BlockDuration: 2 * time.Minute, CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-6 * time.Hour).Truncate(2 * time.Hour)
	main := []sample.Frame{{Function: "main", Module: "/usr/bin/churn", Address: 0x100, Kind: sample.KindUser}}
	before := heapInUse()
	pid := uint32(100_000)
	for j := range threads {
		pid++
		s := synth.ChurnSample(pid, start.Add(time.Duration(j)*2*time.Minute/threads).UnixNano(), main)
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	head := heapInUse() - before
	peak := heappeak.During(func() {
		db.mu.Lock()
		db.cutLocked()
		db.mu.Unlock()
		awaitSealed(t, db)
	})
	t.Logf("a head of %d threads: %.1f MB; writing it took %.1f MB more at peak", threads, mb(head), mb(peak))
	if st := db.Stats(); st.Blocks != 1 {
		t.Fatalf("%d blocks after the cut, want 1", st.Blocks)
	}
	if peak > head*3/4 {
		t.Errorf("writing a head of %.1f MB took %.1f MB more at peak, want at most three quarters of the head", mb(head), mb(peak))
	}
}
