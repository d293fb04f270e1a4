package bucketcompact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/store"
)

// day is a UTC midnight two days back: every window of it has closed.
func day() time.Time { return time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour) }

func newCompactor(t *testing.T, bkt *faultyBucket, clk *clock, opts Options) *Compactor {
	t.Helper()
	opts.WorkDir = t.TempDir()
	opts.Now = clk.now
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.Holder == "" {
		opts.Holder = "test"
	}
	c, err := New(bkt, "test bucket", opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func run(t *testing.T, c *Compactor) Report {
	t.Helper()
	rep, err := c.Run(context.Background())
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	return rep
}

// TestMergeKeepsEverySample merges two nodes' small blocks and checks,
// through the store's Select over the bucket, that the samples are the
// same before and after, that readers see only the merged blocks at once,
// that the parents stay until the delete delay has passed, and what the
// bucket index lists at each step.
func TestMergeKeepsEverySample(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("fleet")}
	d := day()
	ship(t, bkt, "node-a", span(d.Add(10*time.Minute), 2*time.Minute), span(d.Add(20*time.Minute), 2*time.Minute), span(d.Add(30*time.Minute), 2*time.Minute))
	ship(t, bkt, "node-b", span(d.Add(10*time.Minute), 2*time.Minute), span(d.Add(40*time.Minute), 2*time.Minute))
	// A block in the next 2 h window of node-a: nothing to merge it with.
	ship(t, bkt, "node-a", span(d.Add(3*time.Hour), 2*time.Minute))

	clk := newClock(time.Now())
	db := readerAt(t, bkt, clk.now)
	before, sum := digest(t, db, nil)
	if before == 0 {
		t.Fatal("no samples shipped")
	}
	c := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})
	rep := run(t, c)
	if rep.Merges != 2 || rep.MergedParents != 5 || rep.Marked["compacted"] != 5 || rep.Deleted != 0 {
		t.Fatalf("first pass: %+v, want 2 merges of 5 parents, 5 marked, none deleted", rep)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, n := range db.Nodes() {
		if want := map[string]int{"node-a": 2, "node-b": 1}[n.Name]; n.Blocks != want {
			t.Errorf("reader after the merge: node %s has %d blocks, want %d (merged + the lone one)", n.Name, n.Blocks, want)
		}
	}
	if after, sum2 := digest(t, db, nil); after != before || sum2 != sum {
		t.Fatalf("after the merge: %d samples (%s), before %d (%s)", after, sum2, before, sum)
	}
	if framePointerFrames(t, db) == 0 {
		t.Error("no frame found with frame pointers: the digests do not show that merges keep how frames were found")
	}
	objs := objects(t, bkt)
	if got := countSuffix(objs, "/"+bucketlayout.DeletionMarkFile); got != 0 {
		t.Fatalf("%d deletion-mark.json objects, want none: the merged blocks' metas mark their parents: %v", got, objs)
	}
	if got := countSuffix(objs, "/"+bucketlayout.DataFile); got != 8 {
		t.Fatalf("%d data objects before the delete delay, want 8 (6 shipped + 2 merged)", got)
	}
	ix, err := bucketindex.Read(context.Background(), bkt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Blocks) != 8 || len(ix.DeletionMarks) != 5 || ix.Stale(clk.now(), time.Minute) {
		t.Fatalf("index: %d blocks, %d marks, updated %d; want 8, 5, fresh", len(ix.Blocks), len(ix.DeletionMarks), ix.UpdatedAt)
	}
	// A fresh reader (a query service started now) sees the same samples.
	if n, s := digest(t, reader(t, bkt), nil); n != before || s != sum {
		t.Fatalf("fresh reader: %d samples, want %d", n, before)
	}

	clk.add(DefaultDeleteDelay + time.Minute)
	rep = run(t, c)
	if rep.Deleted != 5 || rep.Merges != 0 || rep.Blocks != 3 {
		t.Fatalf("pass after the delay: %+v, want 5 deleted, no merge, 3 blocks", rep)
	}
	objs = objects(t, bkt)
	if countSuffix(objs, "/"+bucketlayout.DataFile) != 3 || countSuffix(objs, "/"+bucketlayout.DeletionMarkFile) != 0 || countSuffix(objs, "/"+bucketlayout.MetaFile) != 3 {
		t.Fatalf("after deletion: %v", objs)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if n, s := digest(t, db, nil); n != before || s != sum {
		t.Fatalf("after deletion: %d samples, want %d", n, before)
	}
	ix, err = bucketindex.Read(context.Background(), bkt)
	if err != nil || len(ix.Blocks) != 3 || len(ix.DeletionMarks) != 0 {
		t.Fatalf("index after deletion: %+v, %v", ix, err)
	}

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c.Collector()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"heatscope_compactor_merges_total": 2, "heatscope_compactor_deleted_blocks_total": 5,
		"heatscope_compactor_deletion_marks_total": 5, "heatscope_compactor_bucket_blocks": 3, "heatscope_compactor_passes_total": 2} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == name {
				found = true
				m := mf.GetMetric()[0]
				got := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				if got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		}
		if !found {
			t.Errorf("no metric %s", name)
		}
	}
	if n := testutil.CollectAndCount(c.Collector()); n < 15 {
		t.Errorf("%d compactor metrics, want at least 15", n)
	}
}

// TestQueryWhileCompacting runs a query that is part way through the
// parents when the compactor merges and marks them, then again while it
// deletes them: the query that started first finishes with every sample,
// since the parents stay for the delete delay.
func TestQueryWhileCompacting(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("")}
	d := day()
	ship(t, bkt, "node-a", span(d.Add(5*time.Minute), 3*time.Minute), span(d.Add(15*time.Minute), 3*time.Minute), span(d.Add(25*time.Minute), 3*time.Minute))
	clk := newClock(time.Now())
	db := readerAt(t, bkt, clk.now)
	want, sum := digest(t, db, nil)
	c := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})

	// The query holds after its first batch while a pass merges, marks,
	// and the reader refreshes (as a query service does every few seconds).
	n, s := digest(t, db, func() {
		if rep := run(t, c); rep.Merges != 1 || rep.Marked["compacted"] != 3 {
			t.Errorf("pass during the query: %+v", rep)
		}
		if err := db.Refresh(); err != nil {
			t.Error(err)
		}
	})
	if n != want || s != sum {
		t.Fatalf("query running while the compactor merged: %d samples, want %d", n, want)
	}
	// A second query starts before the delay is over and holds while the
	// parents are deleted: it reads the merged block, so it is whole too.
	n, s = digest(t, db, func() {
		clk.add(DefaultDeleteDelay)
		if rep := run(t, c); rep.Deleted != 3 {
			t.Errorf("pass after the delay: %+v, want 3 deleted", rep)
		}
	})
	if n != want || s != sum {
		t.Fatalf("query running while the compactor deleted: %d samples, want %d", n, want)
	}
}

// TestRetention marks blocks by age and by size, and deletes them only
// after the delay.
func TestRetention(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("r")}
	now := time.Now()
	// One block in each hour; with 1 h ranges nothing merges.
	old := ship(t, bkt, "node-a", span(now.Add(-50*time.Hour).Truncate(time.Hour), time.Minute), span(now.Add(-30*time.Hour).Truncate(time.Hour), time.Minute))
	recent := ship(t, bkt, "node-a", span(now.Add(-5*time.Hour).Truncate(time.Hour), time.Minute), span(now.Add(-4*time.Hour).Truncate(time.Hour), time.Minute), span(now.Add(-3*time.Hour).Truncate(time.Hour), time.Minute))
	clk := newClock(now)
	c := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{time.Hour}, Retention: 24 * time.Hour})
	rep := run(t, c)
	if rep.Marked["retention-age"] != 2 || rep.Merges != 0 {
		t.Fatalf("age retention: %+v, want the 2 blocks older than 24 h marked", rep)
	}
	ix, err := bucketindex.Read(context.Background(), bkt)
	if err != nil {
		t.Fatal(err)
	}
	var marked []string
	var sizes = map[string]int64{}
	for _, m := range ix.DeletionMarks {
		marked = append(marked, m.ID)
	}
	for _, b := range ix.Blocks {
		sizes[b.ID] = b.Bytes
	}
	slices.Sort(marked)
	if !slices.Equal(marked, old) {
		t.Fatalf("marked %v, want the old blocks %v", marked, old)
	}
	// Keep the two newest blocks' bytes: the oldest recent one goes.
	limit := sizes[recent[1]] + sizes[recent[2]]
	c.opts.RetentionBytes = limit
	rep = run(t, c)
	if rep.Marked["retention-size"] != 1 {
		t.Fatalf("size retention: %+v, want 1 block marked", rep)
	}
	if m, ok := c.marks["node-a/"+recent[0]]; !ok || m.Reason != "retention-size" {
		t.Fatalf("size retention marked %v, want %s", c.marks, recent[0])
	}
	if rep.Deleted != 0 || countSuffix(objects(t, bkt), "/"+bucketlayout.DataFile) != 5 {
		t.Fatalf("deleted before the delay: %+v", rep)
	}
	clk.add(DefaultDeleteDelay)
	if rep = run(t, c); rep.Deleted != 3 || rep.Blocks != 2 || rep.Bytes != limit {
		t.Fatalf("after the delay: %+v, want 3 deleted, 2 blocks of %d bytes", rep, limit)
	}
}

// TestCorruptBlocksSkippedAndNamed damages one block's data and another
// block's meta: each is skipped and named, and the rest is merged.
func TestCorruptBlocksSkippedAndNamed(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("c")}
	d := day()
	a := ship(t, bkt, "node-a", span(d.Add(5*time.Minute), 2*time.Minute), span(d.Add(15*time.Minute), 2*time.Minute), span(d.Add(25*time.Minute), 2*time.Minute))
	b := ship(t, bkt, "node-b", span(d.Add(5*time.Minute), 2*time.Minute), span(d.Add(15*time.Minute), 2*time.Minute), span(d.Add(25*time.Minute), 2*time.Minute))
	ctx := context.Background()
	// Flip bytes in the middle of a data object (same size: only the
	// block's CRCs can tell).
	name := bucketlayout.Block{Node: "node-a", ID: a[1]}.Object(bucketlayout.DataFile)
	rc, err := bkt.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	for i := len(raw) / 4; i < len(raw)/4+64; i++ {
		raw[i] ^= 0xff
	}
	if err := bkt.Upload(ctx, name, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if err := bkt.Upload(ctx, bucketlayout.Block{Node: "node-b", ID: b[0]}.Object(bucketlayout.MetaFile), strings.NewReader("{not json")); err != nil {
		t.Fatal(err)
	}
	c := newCompactor(t, bkt, newClock(time.Now()), Options{Ranges: []time.Duration{2 * time.Hour}})
	rep := run(t, c)
	if rep.Merges != 2 || rep.MergedParents != 4 {
		t.Fatalf("%+v: want the 2 good blocks of each node merged", rep)
	}
	joined := strings.Join(rep.Corrupt, "\n")
	if len(rep.Corrupt) != 2 || !strings.Contains(joined, "node-a/"+a[1]) || !strings.Contains(joined, "CRC") ||
		!strings.Contains(joined, "node-b/"+b[0]) || !strings.Contains(joined, "meta.json") {
		t.Fatalf("corrupt blocks named: %q", rep.Corrupt)
	}
	if got := testutil.ToFloat64(collectorOf(c, "heatscope_compactor_corrupt_blocks_total")); got != 2 {
		t.Fatalf("corrupt metric %v, want 2", got)
	}
	// The damaged blocks are neither marked nor listed in the index.
	ix, err := bucketindex.Read(ctx, bkt)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ix.Blocks {
		if m.ID == a[1] || m.ID == b[0] {
			t.Fatalf("index lists corrupt block %s/%s", m.Node, m.ID)
		}
	}
	for _, m := range ix.DeletionMarks {
		if m.ID == a[1] || m.ID == b[0] {
			t.Fatalf("corrupt block %s/%s marked for deletion", m.Node, m.ID)
		}
	}
	// The index lists them as corrupt, the one with a readable meta with
	// it; and a query service reading the index names them exactly as one
	// listing the bucket does: the same warnings, the same skips counted.
	// (Left out of the index, their samples vanished without a word.)
	if len(ix.Corrupt) != 2 || ix.Corrupt[0].ID != a[1] || ix.Corrupt[0].Meta == nil || !strings.Contains(ix.Corrupt[0].Reason, "CRC") ||
		ix.Corrupt[1].ID != b[0] || ix.Corrupt[1].Meta != nil || !strings.Contains(ix.Corrupt[1].Reason, "meta.json") {
		t.Fatalf("index's corrupt blocks: %+v, want node-a/%s (with its meta) and node-b/%s", ix.Corrupt, a[1], b[0])
	}
	type view struct {
		warnings []string
		skips    uint64
		samples  int
	}
	look := func(indexMaxAge time.Duration) (view, bucketstore.Stats) {
		src := bucketstore.New(bkt, "test bucket", bucketstore.Options{IndexMaxAge: indexMaxAge})
		db, err := store.OpenReader([]store.BlockSource{src}, store.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v view
		w, err := db.Select(ctx, store.Range{From: 0, To: 1 << 62}, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
			v.samples += len(b.Rows)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range w {
			v.warnings = append(v.warnings, e.Error())
		}
		slices.Sort(v.warnings)
		v.skips = db.Stats().CorruptSkips
		return v, src.Stats()
	}
	listed, ls := look(-1)
	indexed, is := look(time.Hour)
	if ls.IndexReads != 0 || is.Listings != 0 {
		t.Fatalf("the listing reader read the index %d times, the index reader listed %d times", ls.IndexReads, is.Listings)
	}
	if len(listed.warnings) == 0 || !strings.Contains(strings.Join(listed.warnings, " "), a[1]) || listed.skips < 2 {
		t.Fatalf("a reader listing the bucket: %+v, want the corrupt data named and both blocks counted", listed)
	}
	if !slices.Equal(indexed.warnings, listed.warnings) || indexed.skips != listed.skips || indexed.samples != listed.samples {
		t.Fatalf("a reader of the index sees %+v, one listing the bucket %+v: want the same", indexed, listed)
	}
}

// collectorOf returns one metric of the compactor's collector.
func collectorOf(c *Compactor, name string) prometheus.Collector {
	return filtered{c.Collector(), name}
}

type filtered struct {
	prometheus.Collector
	name string
}

func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 64)
	go func() { f.Collector.Collect(all); close(all) }()
	for m := range all {
		if strings.Contains(m.Desc().String(), `"`+f.name+`"`) {
			ch <- m
		}
	}
}

// TestIdempotentAndCrashes re-runs passes (nothing more happens), and
// cuts passes short at each upload: before the merged block's meta (no
// partial block is visible; the partial upload goes after the partial
// age), and after the merged blocks, at the index (their metas mark the
// parents: a new compactor finds them marked).
func TestIdempotentAndCrashes(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("i")}
	d := day()
	ship(t, bkt, "node-a", span(d.Add(5*time.Minute), 2*time.Minute), span(d.Add(15*time.Minute), 2*time.Minute))
	ship(t, bkt, "node-b", span(d.Add(5*time.Minute), 2*time.Minute), span(d.Add(15*time.Minute), 2*time.Minute))
	clk := newClock(time.Now())
	db := readerAt(t, bkt, clk.now)
	want, sum := digest(t, db, nil)
	c := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})

	// Crash 1: the merged block's data is up, its meta is not.
	suffix := "/" + bucketlayout.MetaFile
	bkt.failSuffix.Store(&suffix)
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "injected crash") {
		t.Fatalf("pass with a crash before the meta: %v", err)
	}
	bkt.failSuffix.Store(nil)
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if n := len(db.Nodes()); n != 2 || db.Nodes()[0].Blocks != 2 {
		t.Fatalf("reader after the crash: %+v, want the 2 shipped blocks per node", db.Nodes())
	}
	if n, s := digest(t, db, nil); n != want || s != sum {
		t.Fatalf("after a crash before the meta: %d samples, want %d", n, want)
	}
	// Crash 2: the merged blocks are complete, and the pass dies before
	// anything else (at the index). Their metas alone mark the parents: a
	// compactor started afresh (nothing in its memory) finds the 4 parents
	// marked, at the merged blocks' upload, and merges nothing again.
	suffix = bucketlayout.IndexKey
	bkt.failSuffix.Store(&suffix)
	if _, err := c.Run(context.Background()); err == nil {
		t.Fatal("pass with a crash at the index succeeded")
	}
	bkt.failSuffix.Store(nil)
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if n, s := digest(t, db, nil); n != want || s != sum {
		t.Fatalf("after a crash at the index: %d samples, want %d", n, want)
	}
	if got := countSuffix(objects(t, bkt), "/"+bucketlayout.DeletionMarkFile); got != 0 {
		t.Fatalf("%d deletion-mark.json objects, want none: a merged block's meta marks its parents", got)
	}
	// The crashed compactor's lock expires; a new one takes over.
	clk.add(DefaultLockTTL + time.Second)
	c = newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})
	rep := run(t, c)
	if rep.Merges != 0 || len(rep.Marked) != 0 || rep.Deleted != 0 {
		t.Fatalf("pass of a new compactor after the crashes: %+v, want no merge, no new mark, none deleted", rep)
	}
	// Idempotent: another pass changes nothing.
	ix1, err := bucketindex.Read(context.Background(), bkt)
	if err == nil && len(ix1.DeletionMarks) != 4 {
		t.Fatalf("index after the new compactor's pass: %d deletion marks, want the 4 parents the crashed pass's merged blocks mark", len(ix1.DeletionMarks))
	}
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, bkt)
	rep = run(t, c)
	if rep.Merges != 0 || len(rep.Marked) != 0 || rep.Deleted != 0 || rep.PartialDeleted != 0 {
		t.Fatalf("second pass did something: %+v", rep)
	}
	ix2, err := bucketindex.Read(context.Background(), bkt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix1.Blocks) != len(ix2.Blocks) || !slices.Equal(objs, objects(t, bkt)) {
		t.Fatalf("second pass changed the bucket: %d→%d indexed blocks", len(ix1.Blocks), len(ix2.Blocks))
	}
	// After the delay and the partial age, only the merged blocks are left.
	clk.add(DefaultPartialAge + time.Hour)
	rep = run(t, c)
	if rep.Deleted != 4 || rep.PartialDeleted != 1 || rep.Blocks != 2 {
		t.Fatalf("pass after the delays: %+v, want 4 deleted, the partial upload deleted, 2 blocks", rep)
	}
	if got := objects(t, bkt); countSuffix(got, "/"+bucketlayout.DataFile) != 2 || countSuffix(got, "/"+bucketlayout.MetaFile) != 2 {
		t.Fatalf("left in the bucket: %v", got)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if n, s := digest(t, db, nil); n != want || s != sum {
		t.Fatalf("at the end: %d samples, want %d", n, want)
	}
}

// TestOneCompactorPerBucket: a second compactor is refused while the
// first's lock is fresh, and takes over once it is released or expired;
// the first then knows it lost it.
func TestOneCompactorPerBucket(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("l")}
	clk := newClock(time.Now())
	first := newCompactor(t, bkt, clk, Options{Holder: "first"})
	second := newCompactor(t, bkt, clk, Options{Holder: "second"})
	run(t, first)
	var held *LockHeldError
	if _, err := second.Run(context.Background()); !errors.As(err, &held) || !strings.Contains(err.Error(), "another compactor (first) holds the lock") {
		t.Fatalf("second compactor: %v, want a refusal naming the first", err)
	}
	run(t, first) // renews its own lock
	clk.add(DefaultLockTTL + time.Second)
	run(t, second) // expired: taken over
	if _, err := first.Run(context.Background()); !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "(second)") {
		t.Fatalf("first compactor after the second took over: %v, want ErrLockLost naming the second", err)
	}
	if err := first.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := bkt.Exists(context.Background(), bucketlayout.CompactorLockKey); !ok {
		t.Fatal("the compactor that lost the lock deleted it")
	}
	if err := second.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, first)
	// An empty bucket gets an empty index.
	ix, err := bucketindex.Read(context.Background(), bkt)
	if err != nil || len(ix.Blocks) != 0 || ix.Blocks == nil {
		t.Fatalf("empty bucket's index: %+v, %v", ix, err)
	}
}

// TestLockRace starts eight compactors at the same instant on one bucket:
// exactly one takes the lock, the others are refused with its name. With
// a read then a write, as the lock was taken before, several won.
func TestLockRace(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("race")}
	clk := newClock(time.Now())
	for round := range 3 {
		var cs []*Compactor
		for i := range 8 {
			cs = append(cs, newCompactor(t, bkt, clk, Options{Holder: fmt.Sprintf("c%d", i)}))
		}
		errs := make([]error, len(cs))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range cs {
			wg.Go(func() {
				<-start
				errs[i] = c.Lock(context.Background(), false)
			})
		}
		close(start)
		wg.Wait()
		var winners []string
		for i, err := range errs {
			var held *LockHeldError
			switch {
			case err == nil:
				winners = append(winners, cs[i].opts.Holder)
			case !errors.As(err, &held):
				t.Fatalf("round %d: %s: %v, want a refusal naming the holder", round, cs[i].opts.Holder, err)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d compactors took the lock (%v), want exactly 1", round, len(winners), winners)
		}
		for i, err := range errs {
			if err != nil && !strings.Contains(err.Error(), "another compactor ("+winners[0]+")") {
				t.Fatalf("round %d: %s's refusal %q does not name the holder %s", round, cs[i].opts.Holder, err, winners[0])
			}
		}
		// Round 1 races for an expired lock, round 2 for a released one.
		if round == 0 {
			clk.add(DefaultLockTTL + time.Second)
		} else {
			for _, c := range cs {
				if err := c.Unlock(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestLockNotRenewedStopsWrites: a compactor whose lock was not renewed
// for most of its time to live (its bucket away, its process paused)
// writes nothing more, since another may have taken over, until it
// renews it.
func TestLockNotRenewedStopsWrites(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("stale")}
	clk := newClock(time.Now())
	c := newCompactor(t, bkt, clk, Options{})
	if err := c.Lock(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	clk.add(DefaultLockTTL)
	var rep Report
	if err := c.writeIndex(context.Background(), nil, nil, clk.now(), &rep); !errors.Is(err, ErrLockStale) {
		t.Fatalf("index write with a lock not renewed for its time to live: %v, want ErrLockStale", err)
	}
	if ok, _ := bkt.Exists(context.Background(), bucketlayout.IndexKey); ok {
		t.Fatal("the index was written")
	}
	run(t, c) // renews it (nobody took it over), then writes
}

// TestUpdateIndex: between passes the compactor rewrites the index from a
// fresh listing (blocks, event segments, when the listing began), and
// deletes, marks and merges nothing.
func TestUpdateIndex(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("u")}
	d := day()
	first := ship(t, bkt, "node-a", span(d.Add(5*time.Minute), 2*time.Minute), span(d.Add(15*time.Minute), 2*time.Minute))
	seg := "node-a/events/0000000001.seg"
	if err := bkt.Upload(context.Background(), seg, strings.NewReader("segment bytes")); err != nil {
		t.Fatal(err)
	}
	clk := newClock(time.Now())
	c := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})
	listed := clk.now()
	rep, err := c.UpdateIndex(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Merges != 0 || rep.Deleted != 0 || len(rep.Marked) != 0 || rep.Blocks != 2 {
		t.Fatalf("index update: %+v, want 2 blocks and nothing merged, marked or deleted", rep)
	}
	ix, err := bucketindex.Read(context.Background(), bkt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Blocks) != 2 || ix.ListedAt != listed.UnixMilli() || len(ix.Segments) != 1 || ix.Segments[0].Name != seg || ix.Segments[0].Node != "node-a" || ix.Segments[0].Modified <= 0 {
		t.Fatalf("index: %d blocks, listed at %d (want %d), segments %+v", len(ix.Blocks), ix.ListedAt, listed.UnixMilli(), ix.Segments)
	}
	if got := countSuffix(objects(t, bkt), "/"+bucketlayout.DataFile); got != 2 {
		t.Fatalf("%d data objects after an index update, want the 2 shipped", got)
	}
	// A block uploaded since is in the next update.
	next := ship(t, bkt, "node-b", span(d.Add(5*time.Minute), 2*time.Minute))
	clk.add(10 * time.Second)
	if _, err := c.UpdateIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ix, err = bucketindex.Read(context.Background(), bkt); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ix.Blocks {
		ids = append(ids, m.ID)
	}
	if want := append(slices.Clone(first), next...); !slices.Equal(ids, want) || ix.ListedAt != clk.now().UnixMilli() {
		t.Fatalf("index after an upload: %v listed at %d, want %v at %d", ids, ix.ListedAt, want, clk.now().UnixMilli())
	}
}

// TestPeriodsStayApart ships one node's blocks of one 2 h window, two at
// 49 Hz and two at 99 Hz (the overhead guard changed the rate): the
// compactor merges each period's blocks apart, since a block states one
// period, what each of its samples weighs, and the CPU time the reader
// adds up is the same before and after.
func TestPeriodsStayApart(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("")}
	d := day()
	ship(t, bkt, "node-a", span(d.Add(5*time.Minute), 2*time.Minute), span(d.Add(15*time.Minute), 2*time.Minute))
	shipHz(t, bkt, "node-a", 99, span(d.Add(25*time.Minute), 2*time.Minute), span(d.Add(35*time.Minute), 2*time.Minute))
	db := reader(t, bkt)
	cpu := func() int64 {
		var ns int64
		if _, err := db.Select(context.Background(), store.Range{From: 0, To: 1 << 62}, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
			ns += int64(len(b.Rows)) * b.Weight()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	before := cpu()
	c := newCompactor(t, bkt, newClock(time.Now()), Options{Ranges: []time.Duration{2 * time.Hour}})
	for range 3 {
		run(t, c)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	periods := map[int64]int{}
	for _, b := range liveBlocks(t, bkt) {
		periods[b.PeriodNs]++
	}
	if periods[int64(1e9)/49] != 1 || periods[int64(1e9)/99] != 1 || len(periods) != 2 {
		t.Fatalf("blocks by period after compaction: %v, want one merged block per period", periods)
	}
	if after := cpu(); after != before {
		t.Fatalf("CPU time %d ns after compaction, %d before", after, before)
	}
}

// TestForgetsBlocksGoneFromTheListing deletes a block behind the
// compactor's back (as another compactor or an operator would): the next
// pass drops what it kept of it, so its caches follow the listing.
func TestForgetsBlocksGoneFromTheListing(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("gone")}
	d := day()
	ids := ship(t, bkt, "node-a", span(d.Add(10*time.Minute), time.Minute), span(d.Add(20*time.Minute), time.Minute), span(d.Add(30*time.Minute), time.Minute))
	// Blocks too big to merge: the pass reads their index bytes, merges nothing.
	c := newCompactor(t, bkt, newClock(time.Now()), Options{MaxBlockBytes: 1})
	if rep := run(t, c); rep.Merges != 0 || rep.Blocks != 3 {
		t.Fatalf("first pass: %+v, want 3 blocks and no merge", rep)
	}
	if len(c.indexBytes) != 3 || len(c.metas) != 3 {
		t.Fatalf("after the first pass the compactor keeps %d index sizes and %d metas, want 3 of each", len(c.indexBytes), len(c.metas))
	}
	for _, f := range []string{bucketlayout.MetaFile, bucketlayout.DataFile} {
		if err := bkt.Delete(context.Background(), bucketlayout.Block{Node: "node-a", ID: ids[0]}.Object(f)); err != nil {
			t.Fatal(err)
		}
	}
	if rep := run(t, c); rep.Blocks != 2 {
		t.Fatalf("second pass: %+v, want 2 blocks", rep)
	}
	for name, keys := range map[string][]string{
		"index sizes": slices.Sorted(maps.Keys(c.indexBytes)),
		"metas":       slices.Sorted(maps.Keys(c.metas)),
	} {
		if want := []string{"node-a/" + ids[1], "node-a/" + ids[2]}; !slices.Equal(keys, want) {
			t.Errorf("after the block %s went the compactor keeps the %s of %v, want %v", ids[0], name, keys, want)
		}
	}
}

// TestMarksReportedOnce: a pass reports the deletion marks it made, not
// those it found made by earlier passes, of its own or of a compactor
// before it (compact --once run again reported every parent still
// waiting for the delete delay as marked).
func TestMarksReportedOnce(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("marks")}
	d := day()
	ship(t, bkt, "node-a", span(d.Add(10*time.Minute), 2*time.Minute), span(d.Add(20*time.Minute), 2*time.Minute))
	clk := newClock(time.Now())
	c := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})
	if rep := run(t, c); rep.Merges != 1 || rep.Marked["compacted"] != 2 {
		t.Fatalf("first pass: %+v, want 1 merge marking its 2 parents", rep)
	}
	if rep := run(t, c); rep.Merges != 0 || len(rep.Marked) != 0 {
		t.Fatalf("second pass of the same compactor: %+v, want nothing merged or marked", rep)
	}
	if err := c.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	next := newCompactor(t, bkt, clk, Options{Ranges: []time.Duration{2 * time.Hour}})
	if rep := run(t, next); rep.Merges != 0 || len(rep.Marked) != 0 {
		t.Fatalf("a new compactor's pass: %+v, want nothing merged or marked", rep)
	}
	if got := testutil.ToFloat64(collectorOf(next, "heatscope_compactor_deletion_marks_total")); got != 0 {
		t.Fatalf("the new compactor counts %v deletion marks, want 0", got)
	}
}

// TestLockOwnWriteRetried: a renewal whose write succeeded but whose
// answer was lost is retried by the client, and that retry's condition
// fails on the compactor's own new version; reading the lock, it finds
// its own token and keeps the lock instead of giving it up.
func TestLockOwnWriteRetried(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("retried")}
	c := newCompactor(t, bkt, newClock(time.Now()), Options{})
	if err := c.Lock(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// The write whose answer was lost: the lock replaced by c's own record.
	if err := bkt.Upload(context.Background(), bucketlayout.CompactorLockKey, bytes.NewReader(c.record(c.opts.Now()))); err != nil {
		t.Fatal(err)
	}
	if err := c.lock(context.Background()); err != nil {
		t.Fatalf("renewal after its own write was retried: %v, want the lock kept", err)
	}
	if err := c.checkLock(); err != nil {
		t.Fatal(err)
	}
	// Another compactor's record is a loss.
	other := newCompactor(t, bkt, newClock(time.Now()), Options{Holder: "other"})
	if err := bkt.Upload(context.Background(), bucketlayout.CompactorLockKey, bytes.NewReader(other.record(other.opts.Now()))); err != nil {
		t.Fatal(err)
	}
	if err := c.lock(context.Background()); !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "(other)") {
		t.Fatalf("renewal after another compactor wrote the lock: %v, want ErrLockLost naming it", err)
	}
}
