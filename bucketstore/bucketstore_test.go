package bucketstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketcompact"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/store"
)

// record writes cfg's samples into a new data directory as node (blocks
// of 30 s) and returns it with its sample count.
func record(t testing.TB, node string, labels map[string]string, cfg synth.Config) (string, int) {
	return storetest.RecordSynth(t, node, labels, cfg, 30*time.Second)
}

// upload puts every block of dir into the bucket under node, as the
// recorder's shipper does.
func upload(t testing.TB, bkt *bucket.Bucket, node, dir string) []string {
	return miniotest.UploadBlocks(t, bkt, node, dir)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// count selects every sample (idle included) and counts them per node.
func count(t testing.TB, db *store.Reader, f store.Filter) (map[string]int, store.Warnings, error) {
	t.Helper()
	f.IncludeIdle = true
	got := map[string]int{}
	w, err := db.Select(context.Background(), store.Range{From: 0, To: 1 << 62}, &f, func(b *store.Batch) error {
		got[b.Node] += len(b.Rows)
		return nil
	})
	return got, w, err
}

var start = time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()

// TestQueriesAcrossNodes uploads two nodes' blocks to a real MinIO and
// queries them through a store over the bucket: every sample, with its
// node; a half-uploaded block (no meta) is invisible; the tails are read
// once and then cached.
func TestQueriesAcrossNodes(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	dirA, nA := record(t, "node-a", map[string]string{"zone": "us-east-1a"}, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 90, Seed: 1})
	dirB, nB := record(t, "node-b", map[string]string{"zone": "us-east-1b"}, synth.Config{CPUs: 3, Hz: 99, Start: start, Seconds: 90, Seed: 2})
	upload(t, bkt, "node-a", dirA)
	upload(t, bkt, "node-b", dirB)
	// A block being uploaded: its data is there, its meta not yet.
	if err := bkt.Upload(context.Background(), bucketlayout.Block{Node: "node-b", ID: "1795237380000-0badf00d"}.Object(bucketlayout.DataFile), strings.NewReader("partial")); err != nil {
		t.Fatal(err)
	}

	src := New(bkt, bkt.Name(), Options{})
	db := storetest.OpenReader(t, src)
	defer db.Close()
	got, warnings, err := count(t, db, store.Filter{})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("select: %v, warnings %v", err, warnings)
	}
	if got["node-a"] != nA || got["node-b"] != nB || len(got) != 2 {
		t.Fatalf("samples per node %v, want node-a %d, node-b %d", got, nA, nB)
	}
	nodes := db.Nodes()
	if len(nodes) != 2 || nodes[1].Name != "node-b" || nodes[1].Labels["zone"] != "us-east-1b" || nodes[1].Samples != nB {
		t.Fatalf("nodes %+v", nodes)
	}
	if got, _, _ := count(t, db, store.Filter{NodeLabels: []store.Label{{Key: "zone", Value: "us-east-1a"}}}); got["node-b"] != 0 || got["node-a"] != nA {
		t.Errorf("zone us-east-1a: %v, want node-a's %d only", got, nA)
	}
	st := src.Stats()
	blocks := nodes[0].Blocks + nodes[1].Blocks
	if st.Gets == 0 || st.TailHits == 0 {
		t.Errorf("stats %+v: want GETs and tail cache hits", st)
	}
	// A second query reads no tail again: the index and chunks are the
	// store's to cache, the tails this source's.
	before := src.Stats().Gets
	if _, _, err := count(t, db, store.Filter{}); err != nil {
		t.Fatal(err)
	}
	if again := src.Stats().Gets - before; again > uint64(4*blocks) {
		t.Errorf("a second query made %d GETs over %d blocks", again, blocks)
	}
}

// TestFollowsUploads: a block uploaded after the store opened is seen at
// the next Refresh; a deleted one leaves.
func TestFollowsUploads(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("")
	dirA, nA := record(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 30, Seed: 1})
	idsA := upload(t, bkt, "node-a", dirA)
	db := storetest.OpenReader(t, New(bkt, bkt.Name(), Options{}))
	defer db.Close()
	dirC, nC := record(t, "node-c", nil, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 30, Seed: 3})
	upload(t, bkt, "node-c", dirC)
	if got, _, _ := count(t, db, store.Filter{}); got["node-c"] != 0 {
		t.Fatalf("before Refresh: %v", got)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-a"] != nA || got["node-c"] != nC {
		t.Fatalf("after Refresh: %v, want node-a %d and node-c %d", got, nA, nC)
	}
	for _, id := range idsA {
		for _, f := range []string{bucketlayout.MetaFile, bucketlayout.DataFile} {
			if err := bkt.Delete(context.Background(), bucketlayout.Block{Node: "node-a", ID: id}.Object(f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-a"] != 0 || got["node-c"] != nC {
		t.Fatalf("after deleting node-a's blocks: %v", got)
	}
}

// TestDamagedObjects: a truncated data object and a corrupt one are
// skipped, each named in the warnings and counted; the rest answers.
func TestDamagedObjects(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("")
	dir, n := record(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 120, Seed: 1})
	ids := upload(t, bkt, "node-a", dir)
	if len(ids) < 3 {
		t.Fatalf("%d blocks, want 3 or more", len(ids))
	}
	ctx := context.Background()
	local, err := store.LocalBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	read := func(id string) []byte {
		i := slices.IndexFunc(local, func(b store.LocalBlock) bool { return b.ID == id })
		if i < 0 {
			t.Fatalf("block %s not in %s", id, dir)
		}
		b, err := os.ReadFile(local[i].DataPath())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	truncated, corrupt := ids[0], ids[1]
	b := read(truncated)
	if err := bkt.Upload(ctx, bucketlayout.Block{Node: "node-a", ID: truncated}.Object(bucketlayout.DataFile), bytes.NewReader(b[:len(b)/2])); err != nil {
		t.Fatal(err)
	}
	b = read(corrupt)
	for i := 100; i < len(b)-200; i += 97 {
		b[i] ^= 0x5a
	}
	if err := bkt.Upload(ctx, bucketlayout.Block{Node: "node-a", ID: corrupt}.Object(bucketlayout.DataFile), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	db := storetest.OpenReader(t, New(bkt, bkt.Name(), Options{}))
	defer db.Close()
	got, warnings, err := count(t, db, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, w := range warnings {
		text += w.Error() + "\n"
	}
	if !strings.Contains(text, truncated) || !strings.Contains(text, corrupt) {
		t.Errorf("warnings:\n%s\nwant both %s (truncated) and %s (corrupt) named", text, truncated, corrupt)
	}
	if got["node-a"] == 0 || got["node-a"] >= n {
		t.Errorf("%d samples answered, want the undamaged blocks' (some, fewer than %d)", got["node-a"], n)
	}
	if db.Stats().CorruptSkips < 2 {
		t.Errorf("corrupt skips %d, want at least 2", db.Stats().CorruptSkips)
	}
}

// TestBucketStopped: with MinIO stopped a query fails within the timeout
// with store.ErrUnavailable naming the bucket (the web API answers 503),
// instead of skipping blocks or hanging; once MinIO is back, it answers.
func TestBucketStopped(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("")
	dir, n := record(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 60, Seed: 1})
	upload(t, bkt, "node-a", dir)
	db := storetest.OpenReader(t, New(bkt, bkt.Name(), Options{Timeout: 3 * time.Second}))
	defer db.Close()
	m.Stop()
	began := time.Now()
	_, _, err := count(t, db, store.Filter{})
	took := time.Since(began)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), bkt.Name()) {
		t.Fatalf("query with the bucket stopped: %v, want ErrUnavailable naming %s", err, bkt.Name())
	}
	if took > 30*time.Second {
		t.Errorf("the failing query took %v", took)
	}
	if strings.Contains(err.Error(), m.SecretKey) || strings.Contains(err.Error(), m.AccessKey) {
		t.Errorf("the error shows a credential: %v", err)
	}
	if err := db.Refresh(); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("refresh with the bucket stopped: %v, want ErrUnavailable", err)
	}
	if err := db.Health(); err == nil || strings.Count(err.Error(), bkt.Name()) != 1 {
		t.Errorf("health with the bucket stopped: %v, want an error naming the bucket once", err)
	}
	m.Restart()
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	got, warnings, err := count(t, db, store.Filter{})
	if err != nil || len(warnings) > 0 || got["node-a"] != n {
		t.Fatalf("after restart: %v (%v, %v), want %d samples", got, err, warnings, n)
	}
	if err := db.Health(); err != nil {
		t.Errorf("unhealthy after the bucket came back: %v", err)
	}
}

// TestEventsAcrossNodes: each node's shipped event segments are read,
// every event labelled with its node, beside the blocks.
func TestEventsAcrossNodes(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("")
	for i, node := range []string{"node-a", "node-b"} {
		var evs []events.Event
		for j := range 3 {
			evs = append(evs, events.Event{Time: start + int64(i*10+j)*1e9, Source: "kmsg", Severity: events.Warning, Text: "ena 0000:00:05.0 eth0: Device reset"})
		}
		miniotest.UploadEvents(t, bkt, node, evs)
	}
	db := storetest.OpenReader(t, New(bkt, bkt.Name(), Options{}))
	defer db.Close()
	evs, more := db.Events(store.Range{From: 0, To: 1 << 62}, store.EventFilter{}, 0)
	if len(evs) != 6 || more {
		t.Fatalf("%d events (more %v), want 6", len(evs), more)
	}
	byNode := map[string]int{}
	for i, e := range evs {
		byNode[e.Labels["node"]]++
		if i > 0 && e.Time < evs[i-1].Time {
			t.Fatalf("events out of time order at %d", i)
		}
	}
	if byNode["node-a"] != 3 || byNode["node-b"] != 3 {
		t.Fatalf("events per node label %v, want 3 each", byNode)
	}
}

// TestReadsTheBucketIndex: with a fresh index (written by the real
// compactor), a refresh makes one GET and no LIST, and sees what the
// index lists, blocks and events; a block uploaded after the index is
// seen once the next index lists it; a stale, missing or corrupt index
// makes the source list the bucket, with the same answers.
func TestReadsTheBucketIndex(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("ix")
	dirA, nA := record(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 60, Seed: 1})
	upload(t, bkt, "node-a", dirA)
	uploadEvents(t, bkt, "node-a", 2)
	comp, err := bucketcompact.New(bkt, bkt.Name(), bucketcompact.Options{WorkDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	updateIndex := func() {
		t.Helper()
		if _, err := comp.UpdateIndex(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var skew atomic.Int64 // the reader's clock ahead of the compactor's
	src := New(bkt, bkt.Name(), Options{Logger: quiet(), Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	// No index yet: the source lists.
	db := storetest.OpenReader(t, src)
	defer db.Close()
	if st := src.Stats(); st.Listings == 0 || st.Lists == 0 {
		t.Fatalf("no index: stats %+v, want a listing", st)
	}
	updateIndex()
	time.Sleep(indexReuse)
	before := src.Stats()
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	st := src.Stats()
	if st.Lists != before.Lists || st.Listings != before.Listings || st.IndexReads == before.IndexReads {
		t.Fatalf("refresh with a fresh index: %+v then %+v, want an index read and no LIST", before, st)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-a"] != nA || len(got) != 1 {
		t.Fatalf("samples from the index's blocks: %v, want node-a %d", got, nA)
	}
	if evs, _ := db.Events(store.Range{From: 0, To: 1 << 62}, store.EventFilter{}, 0); len(evs) != 2 {
		t.Fatalf("%d events from the index's segments, want 2", len(evs))
	}

	// node-b uploads: not in the index yet, so not seen; the next index
	// lists it, and the refresh after it sees it, still without a LIST.
	dirB, nB := record(t, "node-b", nil, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 60, Seed: 2})
	upload(t, bkt, "node-b", dirB)
	uploadEvents(t, bkt, "node-a", 5) // node-a's newest segment grew
	time.Sleep(indexReuse)
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-b"] != 0 {
		t.Fatalf("node-b seen before an index lists it: %v", got)
	}
	updateIndex()
	time.Sleep(indexReuse)
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-a"] != nA || got["node-b"] != nB {
		t.Fatalf("after the next index: %v, want node-a %d, node-b %d", got, nA, nB)
	}
	if evs, _ := db.Events(store.Range{From: 0, To: 1 << 62}, store.EventFilter{}, 0); len(evs) != 5 {
		t.Fatalf("%d events after node-a's segment grew, want 5", len(evs))
	}
	if st2 := src.Stats(); st2.Lists != st.Lists {
		t.Fatalf("%d LISTs while the index was fresh", st2.Lists-st.Lists)
	}

	// The compactor stops: once its index's listing is older than
	// IndexMaxAge, the source lists again, and sees node-c.
	dirC, nC := record(t, "node-c", nil, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 30, Seed: 3})
	upload(t, bkt, "node-c", dirC)
	skew.Store(int64(defaultIndexMaxAge + time.Second))
	time.Sleep(indexReuse)
	before = src.Stats()
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if st := src.Stats(); st.Listings == before.Listings || st.Lists == before.Lists {
		t.Fatalf("stale index: %+v, want a listing", st)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-c"] != nC || got["node-a"] != nA {
		t.Fatalf("listing past a stale index: %v, want node-c %d", got, nC)
	}

	// A corrupt index: listed instead, same answer, no error.
	skew.Store(0)
	if err := bkt.Upload(context.Background(), bucketlayout.IndexKey, strings.NewReader("not gzip")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(indexReuse)
	before = src.Stats()
	if err := db.Refresh(); err != nil {
		t.Fatalf("refresh over a corrupt index: %v", err)
	}
	if st := src.Stats(); st.Listings == before.Listings {
		t.Fatalf("corrupt index: %+v, want a listing", st)
	}
	if got, _, _ := count(t, db, store.Filter{}); got["node-a"] != nA || got["node-b"] != nB || got["node-c"] != nC {
		t.Fatalf("over a corrupt index: %v", got)
	}
}

// uploadEvents writes n events into node's event segment and uploads it,
// as the shipper does (the same object again as it grows).
func uploadEvents(t testing.TB, bkt *bucket.Bucket, node string, n int) {
	t.Helper()
	evs := make([]events.Event, n)
	for j := range evs {
		evs[j] = events.Event{Time: start + int64(j)*1e9, Source: "kmsg", Severity: events.Warning, Text: "ena 0000:00:05.0 eth0: Device reset"}
	}
	miniotest.UploadEvents(t, bkt, node, evs)
}

// TestEventsOfEachInstanceGrow: a node's newest segment is each of its
// instances' newest, not the last by name: the segment of instance aa…
// that its recorder uploads again as it grows is read again although
// instance bb…'s segment (and an old-style object, and an object that is
// no segment at all) sit beside it.
func TestEventsOfEachInstanceGrow(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := srv.Open("")
	ctx := context.Background()
	segment := func(n int) []byte {
		t.Helper()
		dir := t.TempDir()
		db, err := store.Open(dir, store.Options{Source: "a", Node: "a", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if err := db.AppendEvent(events.Event{Time: start + int64(j)*1e9, Source: "kmsg", Severity: events.Warning, Text: fmt.Sprint("event ", j)}); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		b, err := os.ReadFile(filepath.Join(dir, "events", store.EventSegmentName(1)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put := func(key string, b []byte) {
		t.Helper()
		if err := bkt.Upload(ctx, key, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	growing := bucketlayout.EventSegment{Node: "a", Instance: "00000000000000aa", Seq: 1}.Key()
	put(growing, segment(1))
	put(bucketlayout.EventSegment{Node: "a", Instance: "00000000000000bb", Seq: 1}.Key(), segment(2))
	put(bucketlayout.EventSegment{Node: "a", Seq: 3}.Key(), segment(1))
	put("a/events/notes.txt", []byte("not a segment"))
	src := New(bkt, "test bucket", Options{Logger: quiet()})
	count := func() map[string]int {
		t.Helper()
		evs, err := src.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, e := range evs {
			n[e.Labels[store.InstanceLabel]]++
		}
		return n
	}
	if got := count(); got["00000000000000aa"] != 1 || got["00000000000000bb"] != 2 || got[""] != 1 {
		t.Fatalf("events by instance %v, want aa… 1, bb… 2, the old-style object's 1", got)
	}
	put(growing, segment(3))
	if got := count(); got["00000000000000aa"] != 3 || got["00000000000000bb"] != 2 || got[""] != 1 {
		t.Fatalf("after instance aa…'s segment grew: events by instance %v, want aa… 3, bb… 2, the old-style object's 1", got)
	}
}
