package store

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/sample"
)

// TestWeekFastForward drives a store through a week of 2-minute blocks in
// synthetic time, fast-forwarded: every block has processes never seen
// before (an always-on agent under churn), compaction and retention run at
// every block as the recorder's minute tick would, queries fill the chunk
// and index caches, and events are appended. At every synthetic hour past
// the first retention period it checks that nothing outlives what
// retention deleted: no block older than the retention, no block
// directory, WAL segment or open file descriptor of a deleted block, no
// cache entry of a retired block, caches within their limits, and the
// cache's accounting true. At the end the Go heap and the directory's size
// must be where they were after the second day.
//
// It runs twice: "steady", a few new processes a block among recurring
// commands and stacks, and "churn", where every sample is a process of its
// own (its own command, cgroup and leaf frame), as under 200 short-lived
// processes a second, with the merge bound lowered to 30 blocks' index so
// that compaction merges in runs as it does under real churn: then no
// block may hold more index than a merge may take on.
func TestWeekFastForward(t *testing.T) {
	if testing.Short() {
		t.Skip("a week of 2-minute blocks takes a few seconds to tens of seconds; skipped with -short")
	}
	t.Run("steady", func(t *testing.T) { weekFastForward(t, false) })
	t.Run("churn", func(t *testing.T) { weekFastForward(t, true) })
}

func weekFastForward(t *testing.T, churn bool) {
	const (
		block      = 2 * time.Minute
		retention  = 24 * time.Hour
		week       = 7 * 24 * time.Hour
		chunkLimit = 40_000
		indexLimit = 2 << 20
		maxEvents  = 500
		// Retention keeps a 12-hour block until its newest sample is a
		// day old: at most 3 of them, then in the open 12-hour window at
		// most 6 2-hour blocks, 10 20-minute and 10 2-minute ones.
		windowBlocks = 3 + 6 + 10 + 10
		// Under churn a merge takes on at most runBlocks blocks' index.
		runBlocks = 30
	)
	samplesPer, procsPer := 40, 8 // per 2-minute block
	maxBlocksBound := windowBlocks
	if churn {
		samplesPer, procsPer = 150, 150
		// Runs of consecutive blocks: two neighbouring runs hold more
		// than the bound, so the blocks of the retained day and of the
		// open 12- and 2-hour windows (one block a 2-minute block's
		// worth) make at most twice their worth in runs, one more per
		// window.
		worth := int((retention + 14*time.Hour) / block)
		maxBlocksBound = 2*worth/runBlocks + windowBlocks
	}
	dir := memDir(t)
	var warnings bytes.Buffer // compaction failures and the like
	db, err := Open(dir, Options{Source: "node", PeriodNs: int64(time.Second / 99), BlockDuration: block,
		Retention: retention, ChunkCacheSamples: chunkLimit, IndexCacheBytes: indexLimit, MaxEvents: maxEvents,
		CallerTicks: true, Logger: slog.New(slog.NewTextHandler(&warnings, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// The week ends now, so that block IDs and file times stay sane.
	end := time.Now().Truncate(block)
	start := end.Add(-week)
	blocks := int(week / block)
	pid := uint32(1000)
	var (
		checks                   int
		maxBlocks                int
		maxDisk, day2Disk        int64
		day2Heap, endHeap        uint64
		maxFDs                   int
		maxChunkSamples          int
		maxIndexBytes            int64
		maxIndexes, maxChunkEnts int
		maxBlockIndex            int64
		mergedChecked            int // merged blocks whose index bytes were checked
	)
	for i := range blocks {
		t0 := start.Add(time.Duration(i) * block)
		for j := range samplesPer {
			p := pid + uint32(j%procsPer)
			s := sample.Sample{Time: t0.Add(time.Duration(j) * block / time.Duration(samplesPer)).UnixNano(), CPU: uint32(j % 4),
				PID: p, TID: p, Comm: fmt.Sprintf("job-%d", p%97), CgroupID: uint64(5000 + i%300),
				Stack: []sample.Frame{
					{Function: fmt.Sprintf("hot_%d", j%20), Module: "/usr/bin/app", Address: uint64(0x1000 + j%20), Kind: sample.KindUser},
					{Function: "main", Module: "/usr/bin/app", Address: 0x100, Kind: sample.KindUser},
				}}
			if churn { // a process of its own: command, cgroup, leaf frame
				s.Comm, s.CgroupID = fmt.Sprintf("churn-%d", p), uint64(1_000_000+p)
				s.Stack[0].Address = uint64(p) * 16
			}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
		pid += uint32(procsPer)
		if err := db.AppendEvent(events.Event{Time: t0.UnixNano(), Source: "test", Severity: events.Warning, Text: "block " + fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		// The recorder's minute tick, a minute into the next block.
		now := t0.Add(block + time.Minute)
		// The head is cut as the recorder's tick would, and written
		// before the next round of compaction: the agent has a block's
		// duration for it, here fast-forwarded. (A block written after
		// its window was compacted stays apart until the next level's
		// window closes: bounded, but more blocks.)
		db.mu.Lock()
		db.cutLocked()
		db.mu.Unlock()
		awaitSealed(t, db)
		if churn && i == 0 {
			db.mu.RLock()
			db.maxMergedIndexBytes = runBlocks * db.blocks[0].indexBytes()
			db.mu.RUnlock()
		}
		db.maintainAt(now)

		if i%15 == 14 { // every 30 synthetic minutes: what a UI asks
			ctx := context.Background()
			if _, err := db.Select(ctx, Range{now.Add(-3 * time.Hour).UnixNano(), now.UnixNano()}, &Filter{}, func(*Batch) error { return nil }); err != nil {
				t.Fatal(err)
			}
			step := int64(10 * time.Minute)
			from := (now.Add(-48*time.Hour).UnixNano() / step) * step
			if _, _, err := db.Timeline(ctx, Range{from, from + 288*step}, step, &Filter{}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Select(ctx, Range{now.Add(-20 * time.Hour).UnixNano(), now.Add(-19 * time.Hour).UnixNano()}, &Filter{PIDs: []uint32{pid - 1}}, func(*Batch) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		elapsed := time.Duration(i+1) * block
		if elapsed%time.Hour != 0 || elapsed <= retention {
			continue
		}
		checks++
		// The state after the recorder's next minute tick: every cut
		// head written, compaction and retention run over them.
		awaitSealed(t, db)
		db.maintainAt(now)
		st := checkRetained(t, db, dir, now, retention)
		maxBlocks = max(maxBlocks, st.blocks)
		maxDisk = max(maxDisk, st.disk)
		maxFDs = max(maxFDs, st.fds)
		maxChunkSamples = max(maxChunkSamples, st.chunkSamples)
		maxChunkEnts = max(maxChunkEnts, st.chunkEntries)
		maxIndexBytes = max(maxIndexBytes, st.indexBytes)
		maxIndexes = max(maxIndexes, st.indexes)
		if st.blocks > maxBlocksBound || warnings.Len() > 0 {
			db.mu.RLock()
			for _, b := range db.blocks {
				t.Logf("block %s level %d %v to %v, %d samples", b.Meta.ID, b.Meta.Level, time.Unix(0, b.Meta.MinTime).UTC(), time.Unix(0, b.Meta.MaxTime).UTC(), b.Meta.Samples)
			}
			db.mu.RUnlock()
			t.Fatalf("at %v: %d blocks, want at most %d with a retention of %v (compaction or retention stopped); warnings: %s", elapsed, st.blocks, maxBlocksBound, retention, warnings.String())
		}
		// No block holds more index than a merge may take on (a little
		// more: merged ids take longer varints than their parents').
		db.mu.RLock()
		for _, b := range db.blocks {
			maxBlockIndex = max(maxBlockIndex, b.indexBytes())
			if len(b.Meta.Parents) == 0 {
				continue // cut from the head: no merge took it on
			}
			mergedChecked++
			if b.indexBytes() > db.maxMergedIndexBytes*9/8 {
				t.Errorf("at %v: block %s (level %d, %d parents) has %d bytes of index, a merge may take on %d", elapsed, b.Meta.ID, b.Meta.Level, len(b.Meta.Parents), b.indexBytes(), db.maxMergedIndexBytes)
			}
		}
		db.mu.RUnlock()
		if s := db.Stats(); s.Events > maxEvents {
			t.Fatalf("at %v: %d events kept, want at most %d", elapsed, s.Events, maxEvents)
		}
		switch elapsed {
		case 2 * retention:
			day2Disk, day2Heap = st.disk, heapInUse()
			writeHeapProfile(t, "day2")
		case week:
			endHeap = heapInUse()
			writeHeapProfile(t, "day7")
			// Retention keeps a day: the last day's directory is no
			// larger than the second day's, give or take one compacted
			// level's worth of rounding.
			if st.disk > day2Disk*3/2+(64<<10) {
				t.Errorf("the data directory grew from %d bytes after 2 days to %d after 7 with 1 day retained", day2Disk, st.disk)
			}
			if endHeap > day2Heap+(8<<20) {
				t.Errorf("the Go heap grew from %.1f MB after 2 days to %.1f MB after 7 with 1 day retained", mb(day2Heap), mb(endHeap))
			}
		}
	}
	st := db.Stats()
	cgroups := 300
	if churn {
		cgroups = int(pid - 1000)
	}
	t.Logf("a week of %d 2-minute blocks (%d samples, %d processes, %d cgroups), 1 day retained: %d cuts, %d compactions, %d blocks deleted by retention, %d events deleted",
		blocks, st.Appended, pid-1000, cgroups, st.Cuts, st.Compactions, st.RetentionDrop, st.EventsDropped)
	t.Logf("over %d hourly checks past the first day: at most %d blocks (bound %d), the largest block index %d bytes (merge bound %d), %d bytes on disk, %d open files in the directory, chunk cache %d entries / %d samples (limit %d), index cache %d entries / %d bytes (limit %d)",
		checks, maxBlocks, maxBlocksBound, maxBlockIndex, db.maxMergedIndexBytes, maxDisk, maxFDs, maxChunkEnts, maxChunkSamples, chunkLimit, maxIndexes, maxIndexBytes, indexLimit)
	t.Logf("Go heap in use after GC: %.2f MB after 2 days, %.2f MB after 7; directory %d bytes after 2 days", mb(day2Heap), mb(endHeap), day2Disk)
	t.Logf("%d merged blocks' index bytes checked against the merge bound", mergedChecked)
	if mergedChecked == 0 {
		t.Fatalf("no merged block in %d hourly checks: the merge bound was never checked", checks)
	}
	if checks != int((week-retention)/time.Hour) {
		t.Fatalf("%d checks, want %d", checks, (week-retention)/time.Hour)
	}
	if st.RetentionDrop == 0 || st.Compactions == 0 || st.EventsDropped == 0 || maxChunkEnts == 0 || maxIndexes == 0 {
		t.Fatalf("the week did not exercise what it checks: %d blocks deleted, %d compactions, %d events deleted, %d chunk and %d index cache entries at most",
			st.RetentionDrop, st.Compactions, st.EventsDropped, maxChunkEnts, maxIndexes)
	}
}

// memDir is a directory on tmpfs when there is one: the week writes 5040
// blocks, each fsynced, and on a shared disk that took seven minutes; what
// the test checks (what is kept, open and cached) does not depend on the
// disk.
func memDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "heatscope-week-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	t.Log("no /dev/shm: the week runs on the disk (slow where fsync is)")
	return t.TempDir()
}

// writeHeapProfile writes the heap profile into $HEATSCOPE_WEEK_HEAP, when
// set, to compare with go tool pprof -diff_base.
func writeHeapProfile(t *testing.T, name string) {
	dir := os.Getenv("HEATSCOPE_WEEK_HEAP")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// heapInUse is the Go heap's live bytes after a collection (two: what
// sync.Pools keep survives one).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// awaitSealed waits until the cut heads are written as blocks, polling
// more often than waitSealed.
func awaitSealed(t *testing.T, db *DB) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		db.mu.RLock()
		n := len(db.sealing)
		db.mu.RUnlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d heads still being sealed after 30 s", n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// retainedState is what checkRetained measured.
type retainedState struct {
	blocks, fds, chunkEntries, chunkSamples, indexes int
	indexBytes, disk                                 int64
}

// checkRetained asserts that nothing of the blocks retention deleted
// survives: in the DB's list, on disk, among the open files, in the caches.
func checkRetained(t *testing.T, db *DB, dir string, now time.Time, retention time.Duration) retainedState {
	t.Helper()
	var st retainedState
	cutoff := now.Add(-retention).UnixNano()
	db.mu.RLock()
	live := map[*Block]bool{}
	ids := map[string]bool{}
	for _, b := range db.blocks {
		if b.Meta.MaxTime < cutoff {
			t.Fatalf("block %s (newest sample %v) outlived the retention at %v", b.Meta.ID, time.Unix(0, b.Meta.MaxTime), now)
		}
		if b.retired.Load() {
			t.Fatalf("block %s is retired but still listed", b.Meta.ID)
		}
		live[b] = true
		ids[b.Meta.ID] = true
	}
	st.blocks = len(db.blocks)
	db.mu.RUnlock()

	// On disk: a directory per listed block, nothing else; one WAL segment.
	entries, err := os.ReadDir(filepath.Join(dir, blocksDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(ids) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%d entries in blocks/, %d blocks listed: %v", len(entries), len(ids), names)
	}
	for _, e := range entries {
		if !ids[e.Name()] {
			t.Fatalf("blocks/%s is on disk but not a listed block", e.Name())
		}
	}
	wals, err := walSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The head's segment only, once the last cut's block is written (its
	// writer deletes the segment just after listing the block).
	db.mu.RLock()
	headSeq := db.wal.seq
	db.mu.RUnlock()
	for deadline := time.Now().Add(10 * time.Second); len(wals) > 1 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if wals, err = walSegments(dir); err != nil {
			t.Fatal(err)
		}
	}
	if len(wals) != 1 || wals[0] != headSeq {
		t.Fatalf("WAL segments %v on disk, want the head's only (%d)", wals, headSeq)
	}
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			st.disk += fi.Size()
		}
		return nil
	})

	// Open files: one per listed block, none of a deleted file, and
	// besides the blocks at most the lock, the WAL segment and the event
	// segment.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	blockFDs, otherFDs := 0, 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || !strings.HasPrefix(target, dir+"/") {
			continue // closed meanwhile, or not the store's
		}
		if strings.HasSuffix(target, " (deleted)") {
			t.Fatalf("fd %s still open on a deleted file: %s", fd.Name(), target)
		}
		if strings.HasPrefix(target, filepath.Join(dir, blocksDir)+"/") {
			blockFDs++
		} else {
			otherFDs++
		}
	}
	if blockFDs != st.blocks || otherFDs > 3 {
		t.Fatalf("%d open files in blocks/ for %d blocks, %d others (want at most the lock, the WAL and the event segment)", blockFDs, st.blocks, otherFDs)
	}
	st.fds = blockFDs + otherFDs

	// Caches: only live blocks, within their limits, accounted truly.
	samples := int64(0)
	var deadChunk *chunkKey
	db.chunks.Range(func(k chunkKey, t *Table) bool {
		if !live[k.block] {
			deadChunk = &k
			return false
		}
		samples += int64(t.Len())
		st.chunkEntries++
		return true
	})
	if deadChunk != nil {
		t.Fatalf("the chunk cache holds chunk %d of block %s, deleted", deadChunk.chunk, deadChunk.block.Meta.ID)
	}
	st.chunkSamples = int(db.chunks.Weight())
	if samples != int64(st.chunkSamples) || db.chunks.Len() != st.chunkEntries {
		t.Fatalf("chunk cache: counts %d samples in %d entries, holds %d in %d", st.chunkSamples, db.chunks.Len(), samples, st.chunkEntries)
	}
	if st.chunkSamples > db.opts.ChunkCacheSamples && st.chunkEntries > 1 {
		t.Fatalf("chunk cache: %d samples in %d chunks, limit %d", st.chunkSamples, st.chunkEntries, db.opts.ChunkCacheSamples)
	}
	var bytes int64
	var deadIndex *Block
	db.indexes.Range(func(b *Block, ix *blockIndex) bool {
		if !live[b] {
			deadIndex = b
			return false
		}
		bytes += ix.bytes
		st.indexes++
		return true
	})
	if deadIndex != nil {
		t.Fatalf("the index cache holds the index of block %s, deleted", deadIndex.Meta.ID)
	}
	st.indexBytes = db.indexes.Weight()
	if bytes != st.indexBytes {
		t.Fatalf("index cache: counts %d bytes, holds %d", st.indexBytes, bytes)
	}
	if st.indexBytes > db.opts.IndexCacheBytes && st.indexes > 1 {
		t.Fatalf("index cache: %d bytes in %d indexes, limit %d", st.indexBytes, st.indexes, db.opts.IndexCacheBytes)
	}
	s := db.Stats()
	if s.Blocks != st.blocks || s.IndexesCached != st.indexes || s.IndexCacheBytes != st.indexBytes {
		t.Fatalf("Stats says %d blocks, %d indexes, %d index bytes; the DB holds %d, %d, %d", s.Blocks, s.IndexesCached, s.IndexCacheBytes, st.blocks, st.indexes, st.indexBytes)
	}
	return st
}

// TestEncoderKeepsLittle: the shared zstd encoder lives as long as the
// agent, and so does its history buffer. It must stay small: the default
// window kept 16 MB for good (the 2-hour soak's heap profile, issue 14).
func TestEncoderKeepsLittle(t *testing.T) {
	// 4 MiB of what a table section looks like: names and varints.
	var raw []byte
	for i := 0; len(raw) < 4<<20; i++ {
		raw = fmt.Appendf(raw, "[/usr/lib/libfoo%d.so+0x%x] pid-%d ", i%500, i*7919, 1000+i/3)
	}
	before := heapInUse()
	e := newEncoder()
	n := len(e.EncodeAll(raw, nil))
	after := heapInUse()
	runtime.KeepAlive(e)
	runtime.KeepAlive(raw)
	kept := int64(after) - int64(before)
	t.Logf("the encoder keeps %.2f MB after compressing %.1f MB to %.1f MB", float64(kept)/(1<<20), float64(len(raw))/(1<<20), float64(n)/(1<<20))
	if kept > 4<<20 {
		t.Fatalf("the zstd encoder keeps %d bytes after one section, want at most 4 MiB", kept)
	}
}
