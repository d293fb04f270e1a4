package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/internal/tmpfstest"
	"github.com/heatscope/heatscope/sample"
)

var everything = Range{From: math.MinInt64, To: math.MaxInt64}

// all returns every sample in db, idle included, sorted.
func all(t testing.TB, db *DB, f Filter) []sample.Sample {
	t.Helper()
	out, warnings := selectWarned(t, db, f)
	if len(warnings) > 0 {
		t.Fatalf("warnings: %v", warnings)
	}
	return out
}

func appendSynth(t testing.TB, db *DB, cfg synth.Config) []sample.Sample {
	t.Helper()
	g := synth.New(cfg)
	var want []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		s.Time = s.Time / 1000 * 1000
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		want = append(want, s)
	}
	sortSamples(want)
	return want
}

func sameSamples(t *testing.T, got, want []sample.Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d", len(got), len(want))
	}
	for i := range want {
		if !equalSamples(got[i], want[i]) {
			t.Fatalf("sample %d: %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestRoundTripThroughHeadWALAndBlocks(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-2 * time.Minute).UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 4, Hz: 99, Start: now, Seconds: 100, Stacks: 300, Containers: true})
	// Some samples are in blocks already, the rest in the head: both answer.
	sameSamples(t, all(t, db, Filter{}), want)
	if st := db.Stats(); st.Cuts < 2 {
		t.Errorf("%d head cuts for 100 s of data with 30 s blocks", st.Cuts)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := walSegments(dir); len(segs) != 0 {
		t.Errorf("WAL segments left after a clean close: %v", segs)
	}
	db, err = Open(dir, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sameSamples(t, all(t, db, Filter{}), want)
	src := db.Sources()
	if len(src) != 1 || src[0].Name != "host" || src[0].Samples != len(want) || src[0].First != want[0].Time {
		t.Errorf("sources %+v", src)
	}
}

func TestSecondWriterRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = Open(dir, Options{Source: "host"})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("second writer: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	reader, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a reader must open a locked directory: %v", err)
	}
	reader.Close()
}

// sealedBlocks appends cfg's samples, from the start of the hour three
// hours ago, to a new DB in blocks of 10 s, all sealed on return.
func sealedBlocks(t *testing.T, cfg synth.Config) (*DB, []sample.Sample) {
	t.Helper()
	db, err := Open(t.TempDir(), Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.CPUs, cfg.Hz = 2, 99
	cfg.Start = time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	want := appendSynth(t, db, cfg)
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	return db, want
}

func TestCompactionKeepsEverySample(t *testing.T) {
	db, want := sealedBlocks(t, synth.Config{Seconds: 700, Stacks: 200, Containers: true})
	before := db.Stats().Blocks
	db.Maintain()
	after := db.Stats()
	if after.Compactions == 0 || after.Blocks >= before/3 {
		t.Fatalf("compaction: %d blocks before, %d after, %d compactions", before, after.Blocks, after.Compactions)
	}
	sameSamples(t, all(t, db, Filter{}), want)
	// A block cut from the head is level 1 and a merged block one more
	// than its highest parent (merge.go), listing its two or more parents.
	merged := 0
	for _, b := range db.blocks {
		if len(b.Meta.Parents) > 0 {
			merged++
		}
		if (b.Meta.Level > 1) != (len(b.Meta.Parents) > 0) || len(b.Meta.Parents) == 1 {
			t.Errorf("block %s of level %d lists parents %v", b.Meta.ID, b.Meta.Level, b.Meta.Parents)
		}
	}
	t.Logf("%d blocks, %d of them merged", len(db.blocks), merged)
	if merged == 0 {
		t.Fatalf("no merged block among %d: nothing checked", len(db.blocks))
	}
}

// compactChecked runs the compaction Maintain runs, one merge at a time,
// and checks that the parents of every merged block held, together, no
// more index bytes than the bound. It returns how many merges it checked.
func compactChecked(t *testing.T, db *DB) int {
	t.Helper()
	indexBytes := map[string]int64{} // every block seen, by id
	merges := 0
	for {
		plan := db.planCompaction(time.Now())
		if len(plan) == 0 {
			return merges
		}
		db.mu.RLock()
		for _, b := range db.blocks {
			indexBytes[b.Meta.ID] = b.indexBytes()
		}
		db.mu.RUnlock()
		if err := db.merge(plan); err != nil {
			t.Fatal(err)
		}
		merges++
		db.mu.RLock()
		for _, b := range db.blocks {
			if len(b.Meta.Parents) == 0 {
				continue
			}
			sum := int64(0)
			for _, p := range b.Meta.Parents {
				n, ok := indexBytes[p]
				if !ok {
					t.Fatalf("block %s merged block %s, never seen", b.Meta.ID, p)
				}
				sum += n
			}
			if sum > db.maxMergedIndexBytes {
				t.Errorf("block %s merged %d parents with %d bytes of index together, over the bound of %d", b.Meta.ID, len(b.Meta.Parents), sum, db.maxMergedIndexBytes)
			}
		}
		db.mu.RUnlock()
	}
}

// TestCompactionBoundsIndexBytes checks that blocks whose index sections
// together pass the merge bound are left unmerged, that a window over it
// is merged in runs within it, and that below it the window merges whole.
func TestCompactionBoundsIndexBytes(t *testing.T) {
	db, want := sealedBlocks(t, synth.Config{Seconds: 100, Stacks: 50})
	before := db.Stats().Blocks
	db.mu.RLock()
	smallest, largest := db.blocks[0].indexBytes(), int64(0)
	for _, b := range db.blocks {
		smallest, largest = min(smallest, b.indexBytes()), max(largest, b.indexBytes())
	}
	db.mu.RUnlock()
	if before < 5 || smallest <= 0 {
		t.Fatalf("%d blocks, the smallest with %d bytes of index", before, smallest)
	}
	db.maxMergedIndexBytes = 2*smallest - 1 // no two blocks fit
	db.Maintain()
	if st := db.Stats(); st.Compactions != 0 || st.Blocks != before {
		t.Fatalf("over the bound: %d compactions, %d blocks of %d", st.Compactions, st.Blocks, before)
	}
	// Room for two or three blocks a merge: runs, each within the bound.
	db.maxMergedIndexBytes = 3 * largest
	merges := compactChecked(t, db)
	st := db.Stats()
	t.Logf("bound %d bytes of index: %d merges checked, %d blocks of %d", db.maxMergedIndexBytes, merges, st.Blocks, before)
	if merges == 0 || st.Blocks >= before || st.Blocks <= 1 {
		t.Fatalf("runs within the bound: %d merges, %d blocks of %d", merges, st.Blocks, before)
	}
	sameSamples(t, all(t, db, Filter{}), want)
	db.maxMergedIndexBytes = MaxMergedIndexBytes
	db.Maintain()
	if st := db.Stats(); st.Compactions == 0 || st.Blocks >= before {
		t.Fatalf("under the bound: %d compactions, %d blocks of %d", st.Compactions, st.Blocks, before)
	}
	sameSamples(t, all(t, db, Filter{}), want)
}

// TestQueriesDuringSealAndCompaction queries while heads are written as
// blocks and blocks are merged: a query must never see a head and the block
// written from it, or a merged block and its parents, both at once.
func TestQueriesDuringSealAndCompaction(t *testing.T) {
	db, err := Open(t.TempDir(), Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 400, Stacks: 50})
	var appended atomic.Int64
	done := make(chan struct{})
	defer func() { <-done }() // before db.Close, even when a query fails the test
	go func() {
		defer close(done)
		var s sample.Sample
		for n := 0; g.Next(&s); n++ {
			appended.Add(1) // before: a query may see the sample as Append returns
			if err := db.Append(&s); err != nil {
				t.Error(err)
				return
			}
			if n%500 == 499 {
				db.mu.Lock()
				db.cutLocked()
				db.mu.Unlock()
			}
			if n%5000 == 4999 {
				db.Maintain()
			}
		}
		db.mu.Lock()
		db.cutLocked()
		db.mu.Unlock()
		waitSealed(t, db)
		db.Maintain()
	}()
	queries := 0
	for finished := false; !finished; queries++ {
		select {
		case <-done:
			finished = true
		default:
		}
		got := len(all(t, db, Filter{}))
		if max := appended.Load(); int64(got) > max {
			t.Fatalf("query %d saw %d samples, only %d were appended", queries, got, max)
		}
	}
	if got, want := len(all(t, db, Filter{})), appended.Load(); int64(got) != want {
		t.Fatalf("%d samples at the end, %d appended", got, want)
	}
	if st := db.Stats(); st.Compactions == 0 || st.Cuts < 100 {
		t.Fatalf("the test did not exercise what it is for: %+v", st)
	}
	t.Logf("%d queries while sealing and compacting", queries)
}

func waitSealed(t testing.TB, db *DB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		db.mu.RLock()
		n := len(db.sealing)
		db.mu.RUnlock()
		if n == 0 {
			return
		}
	}
	t.Fatal("sealed heads were not written")
}

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := time.Now().Add(-10 * 24 * time.Hour).UnixNano()
	appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: old, Seconds: 300, Stacks: 100})
	recent := time.Now().Add(-time.Hour).UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: recent, Seconds: 300, Stacks: 100, Seed: 2})
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)

	db.opts.Retention = 7 * 24 * time.Hour
	db.applyRetention(time.Now())
	sameSamples(t, all(t, db, Filter{}), want)

	// By size: keep only what fits, dropping the oldest first.
	st := db.Stats()
	db.opts.RetentionSize = st.BlockBytes / 2
	db.applyRetention(time.Now())
	st2 := db.Stats()
	if st2.BlockBytes > db.opts.RetentionSize || st2.Blocks == 0 || st2.Blocks >= st.Blocks {
		t.Fatalf("size retention: %d bytes in %d blocks, limit %d (before: %d in %d)", st2.BlockBytes, st2.Blocks, db.opts.RetentionSize, st.BlockBytes, st.Blocks)
	}
	got := all(t, db, Filter{})
	if got[len(got)-1].Time != want[len(want)-1].Time {
		t.Errorf("size retention dropped the newest data")
	}
}

// closedStore writes 100 s of synthetic samples an hour ago into a new
// directory in blocks of blockDuration, and closes it.
func closedStore(t *testing.T, blockDuration time.Duration) (dir string, start int64, want []sample.Sample) {
	t.Helper()
	dir = t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: blockDuration})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now().Add(-time.Hour).UnixNano()
	want = appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 100, Stacks: 100})
	db.Close()
	return dir, start, want
}

func TestCorruptBlockIsSkippedAndNamed(t *testing.T) {
	dir, _, want := closedStore(t, 20*time.Second)
	entries, _ := os.ReadDir(filepath.Join(dir, blocksDir))
	if len(entries) < 3 {
		t.Fatalf("%d blocks", len(entries))
	}
	// Damage a chunk of the first block, the meta of the second and the
	// index (its strings) of the third.
	victim := filepath.Join(dir, blocksDir, entries[0].Name(), BlockDataFile)
	data, _ := os.ReadFile(victim)
	data[20] ^= 0xff
	os.WriteFile(victim, data, 0o644)
	os.WriteFile(filepath.Join(dir, blocksDir, entries[1].Name(), BlockMetaFile), []byte("garbage"), 0o644)
	third, err := openBlock(filepath.Join(dir, blocksDir, entries[2].Name()))
	if err != nil {
		t.Fatal(err)
	}
	strs := third.sections[sectionStrings]
	third.Close()
	victim = filepath.Join(dir, blocksDir, entries[2].Name(), BlockDataFile)
	data, _ = os.ReadFile(victim)
	data[strs.offset+int64(strs.stored)/2] ^= 0xff
	os.WriteFile(victim, data, 0o644)

	db, err := Open(dir, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Stats().CorruptSkips != 1 {
		t.Errorf("corrupt meta not counted: %+v", db.Stats())
	}
	var got int
	warnings, err := db.Select(context.Background(), everything, &Filter{IncludeIdle: true}, func(b *Batch) error {
		got += len(b.Rows)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The blocks are read in parallel: the warnings come in either order.
	named := func(block string) bool {
		return slices.ContainsFunc(warnings, func(w error) bool { return strings.Contains(w.Error(), block) })
	}
	if len(warnings) != 2 || !named(entries[0].Name()) || !named(entries[2].Name()) {
		t.Fatalf("warnings %v, want one naming block %s and one naming block %s", warnings, entries[0].Name(), entries[2].Name())
	}
	if got == 0 || got >= len(want) {
		t.Fatalf("%d of %d samples answered around the damage", got, len(want))
	}
}

// TestIndexCacheIsBounded checks that opening a directory reads no block's
// index, that a query over every block answers every sample through an
// index cache that holds one, and that the default cache keeps them all.
func TestIndexCacheIsBounded(t *testing.T) {
	dir, start, want := closedStore(t, 10*time.Second)
	for _, limit := range []int64{1, 0} {
		db, err := Open(dir, Options{Source: "host", ReadOnly: true, IndexCacheBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		st := db.Stats()
		if st.Blocks < 3 || st.IndexesCached != 0 || st.IndexCacheBytes != 0 {
			t.Fatalf("opened: %d blocks, %d indexes (%d bytes) in memory; want several blocks, no index", st.Blocks, st.IndexesCached, st.IndexCacheBytes)
		}
		var got int
		if _, err := db.Select(context.Background(), everything, &Filter{IncludeIdle: true}, func(b *Batch) error {
			got += len(b.Rows)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		bucket := int64(summaryBucket) * 1000
		r := Range{From: start / bucket * bucket, To: (start/bucket + 11) * bucket}
		tl, _, err := db.Timeline(context.Background(), r, bucket, &Filter{IncludeIdle: true})
		if err != nil {
			t.Fatal(err)
		}
		counts := tl.Samples
		var fromSummaries int64
		for _, c := range counts {
			fromSummaries += c
		}
		st = db.Stats()
		// The overview again: every block's totals are in memory now.
		againTL, _, err := db.Timeline(context.Background(), r, bucket, &Filter{IncludeIdle: true})
		if err != nil {
			t.Fatal(err)
		}
		again := againTL.Samples
		if reads := db.Stats().IndexReads - st.IndexReads; reads != 0 || !slices.Equal(again, counts) {
			t.Errorf("cache of %d bytes: the second overview read %d indexes, counted %v, first %v", limit, reads, again, counts)
		}
		db.Close()
		if got != len(want) || fromSummaries != int64(len(want)) {
			t.Errorf("cache of %d bytes: %d samples selected, %d in the timeline, %d stored", limit, got, fromSummaries, len(want))
		}
		switch {
		case limit == 1 && st.IndexesCached != 1:
			t.Errorf("a 1-byte cache holds %d indexes, want the last one read", st.IndexesCached)
		case limit == 0 && (st.IndexesCached != st.Blocks || st.IndexCacheBytes <= 0):
			t.Errorf("the default cache holds %d of %d indexes, %d bytes", st.IndexesCached, st.Blocks, st.IndexCacheBytes)
		}
	}
}

func TestTornWALTail(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 10, Stacks: 50, Containers: true})
	db.Flush()
	appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start + 20e9, Seconds: 1, Stacks: 50})
	db.Flush()
	// Simulate a crash mid-write: no clean close, the last page torn.
	seg := walPath(dir, db.wal.seq)
	db.stop <- struct{}{}
	data, _ := os.ReadFile(seg)
	os.WriteFile(seg, data[:len(data)-10], 0o644)
	db.lock.Close()

	db2, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	sameSamples(t, all(t, db2, Filter{}), want)
	if db2.Stats().CorruptSkips != 1 {
		t.Errorf("the torn segment was not reported: %+v", db2.Stats())
	}
}

func TestImportIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := synth.New(synth.Config{CPUs: 4, Hz: 999, Start: 1e15, Seconds: 1200, Stacks: 100})
	var n int
	_, err = db.Import("bad", 0, func(fn func(*sample.Sample) error) error {
		var s sample.Sample
		for g.Next(&s) {
			if n++; n == importBlockSamples+10 {
				return errors.New("line 12345: garbage")
			}
			if err := fn(&s); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "line 12345") {
		t.Fatalf("import error %v", err)
	}
	if st := db.Stats(); st.Blocks != 0 || len(db.Sources()) != 0 {
		t.Fatalf("a failed import left %d blocks, sources %v", st.Blocks, db.Sources())
	}
	entries, _ := os.ReadDir(filepath.Join(dir, blocksDir))
	if len(entries) != 0 {
		t.Fatalf("a failed import left files: %v", entries)
	}
}

// TestDiskFull records into a tiny tmpfs: the recorder must keep going,
// drop the oldest data to make room, and count what it lost; while the WAL
// cannot be written, Append says so (ErrNotDurable), and stops saying so
// once a WAL write succeeds again.
func TestDiskFull(t *testing.T) {
	dir := tmpfstest.Mount(t, "1m")
	db, err := Open(dir, Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-2 * time.Hour).UnixNano()
	// Far more than 3 MB of data, with all-distinct stacks so it does not
	// compress away.
	g := synth.New(synth.Config{CPUs: 8, Hz: 99, Start: start, Seconds: 300, Stacks: 20000})
	var s sample.Sample
	notDurable := 0
	for i := 0; g.Next(&s); i++ {
		if i%2000 == 1999 {
			// The WAL's periodic flush, at a fixed point of the data
			// rather than every 500 ms of a clock: on a quiet machine
			// the loop ran in less than one period, and no Append saw
			// the flush fail.
			db.Flush()
		}
		if err := db.Append(&s); errors.Is(err, ErrNotDurable) {
			notDurable++
		} else if err != nil {
			t.Fatalf("append on a full disk: %v (want the sample kept, ErrNotDurable)", err)
		}
	}
	if notDurable == 0 {
		t.Fatal("the WAL could not be written on a full disk, but no Append said so")
	}
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	st := db.Stats()
	if st.RetentionDrop == 0 {
		t.Fatalf("the disk filled but no block was dropped: %+v", st)
	}
	if st.Blocks == 0 {
		t.Fatalf("nothing kept: %+v", st)
	}
	got := all(t, db, Filter{})
	if len(got) == 0 || got[len(got)-1].Time < start+290e9 {
		t.Fatalf("the newest data was not kept")
	}
	// Space returns: recording carries on normally.
	db.opts.RetentionSize = 1 << 20
	db.applyRetention(time.Now())
	db.Flush() // a WAL write succeeds: appends are durable again
	more := appendSynth(t, db, synth.Config{CPUs: 1, Hz: 99, Start: time.Now().UnixNano(), Seconds: 5, Stacks: 10})
	db.Flush()
	got = all(t, db, Filter{})
	if got[len(got)-1].Time != more[len(more)-1].Time {
		t.Fatal("recording did not resume after space returned")
	}
	db.Close()
}

// The crash test runs a recorder in a child process (this test binary
// re-executed), kills it with SIGKILL, and checks what survived.
const crashChildEnv = "HEATSCOPE_STORE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if dir := os.Getenv(crashEventsChildEnv); dir != "" {
		crashEventsChild(dir)
		return
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	os.Exit(m.Run())
}

// crashChild appends numbered samples stamped with the wall clock, and
// prints the number it reached every 20 ms, until it is killed.
func crashChild(dir string) {
	db, err := Open(dir, Options{Source: "host", BlockDuration: 2 * time.Second})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	stack := []sample.Frame{{Function: "work", Module: "/bin/x", Kind: sample.KindUser}}
	for seq := uint32(0); ; seq++ {
		s := sample.Sample{Time: time.Now().UnixNano(), CPU: seq % 2, PID: 1, TID: seq, Comm: "x", Stack: stack}
		if err := db.Append(&s); err != nil {
			fmt.Println("append:", err)
			os.Exit(1)
		}
		if seq%100 == 0 {
			fmt.Printf("%d %d\n", seq, s.Time)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestCrashLosesAtMostOneSecond(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var lastSeq, lastTime int64
	// Spans two block cuts, and lands anywhere between WAL flushes.
	deadline := time.Now().Add(4*time.Second + rand.N(time.Second))
	for lines.Scan() && time.Now().Before(deadline) {
		f := strings.Fields(lines.Text())
		if len(f) != 2 {
			t.Fatalf("child: %s", lines.Text())
		}
		lastSeq, _ = strconv.ParseInt(f[0], 10, 64)
		lastTime, _ = strconv.ParseInt(f[1], 10, 64)
	}
	child.Process.Kill() // SIGKILL
	child.Wait()
	killedAt := time.Now().UnixNano()

	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if st := db.Stats(); st.CorruptSkips > 1 {
		t.Errorf("%d corrupt files after a crash (at most the torn WAL tail)", st.CorruptSkips)
	}
	got := all(t, db, Filter{})
	seqs := make([]int, len(got))
	for i, s := range got {
		seqs[i] = int(s.TID)
	}
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != i {
			t.Fatalf("samples 0..%d recovered with a hole at %d", seqs[len(seqs)-1], i)
		}
	}
	newest := got[len(got)-1].Time
	for _, s := range got {
		newest = max(newest, s.Time)
	}
	if lost := time.Duration(killedAt - newest); lost > 1100*time.Millisecond {
		t.Fatalf("the newest recovered sample is %v older than the kill (last reported %d at %v)", lost, lastSeq, time.Duration(killedAt-lastTime))
	}
	t.Logf("recovered %d samples; the newest is %v older than the SIGKILL", len(got), time.Duration(killedAt-newest))
}

func TestReaderRefreshSeesTheWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, Options{Source: "host", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now().Add(-time.Hour).UnixNano()
	appendSynth(t, w, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 30, Stacks: 50})
	w.mu.Lock()
	w.cutLocked()
	w.mu.Unlock()
	waitSealed(t, w)

	r, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := len(all(t, r, Filter{}))
	more := appendSynth(t, w, synth.Config{CPUs: 2, Hz: 99, Start: start + 40e9, Seconds: 30, Stacks: 50, Seed: 3})
	w.mu.Lock()
	w.cutLocked()
	w.mu.Unlock()
	waitSealed(t, w)
	if got := len(all(t, r, Filter{})); got != before {
		t.Fatalf("the reader saw new blocks before Refresh: %d -> %d", before, got)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := len(all(t, r, Filter{})); got != before+len(more) {
		t.Fatalf("after Refresh: %d samples, want %d", got, before+len(more))
	}
	// The writer compacts: the reader follows without double counting.
	w.Maintain()
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := len(all(t, r, Filter{})); got != before+len(more) {
		t.Fatalf("after compaction and Refresh: %d samples, want %d", got, before+len(more))
	}
}
