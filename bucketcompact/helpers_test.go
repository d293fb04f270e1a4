package bucketcompact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// reader opens a read-only store over the bucket, as the query service
// (heatscope serve --objstore-config) does.
func reader(t *testing.T, bkt objstore.Bucket) *store.Reader {
	t.Helper()
	return readerAt(t, bkt, nil)
}

// readerAt is reader on the compactor's clock (now; nil for the wall
// clock), so that a pass the test moves the clock past is one the reader
// sees as newer than the bucket index it read last.
func readerAt(t *testing.T, bkt objstore.Bucket, now func() time.Time) *store.Reader {
	t.Helper()
	db, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, "test bucket", bucketstore.Options{Now: now})}, store.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// digest selects every sample (idle ones too) and returns how many there
// are and a hash of them, sorted, each with its node, time, CPU, thread
// and stack (with how each frame was found): equal digests mean identical
// samples.
func digest(t *testing.T, db *store.Reader, hold func()) (int, string) {
	t.Helper()
	var rows []string
	first := true
	w, err := db.Select(context.Background(), store.Range{From: 0, To: 1 << 62}, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
		if first && hold != nil {
			first = false
			hold()
		}
		for _, i := range b.Rows {
			s := b.T.Sample(int(i))
			var fr []string
			for _, f := range s.Stack {
				fr = append(fr, fmt.Sprintf("%s/%d", f.Function, f.Method))
			}
			rows = append(rows, fmt.Sprintf("%s %d %d %d %d %s %s", b.Node, s.Time, s.CPU, s.PID, s.TID, s.Comm, strings.Join(fr, ";")))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	if len(w) > 0 {
		t.Fatalf("select warnings: %v", w)
	}
	slices.Sort(rows)
	h := sha256.New()
	for _, r := range rows {
		io.WriteString(h, r+"\n")
	}
	return len(rows), hex.EncodeToString(h.Sum(nil))
}

var seed atomic.Uint64

// ship writes one block per span for node (synthetic samples: 2 CPUs at
// 49 Hz, frames marked with how they were found) in a local data directory and uploads each as a recorder does:
// data, then meta.json. It returns the block ids.
func ship(t *testing.T, bkt objstore.Bucket, node string, spans ...[2]time.Time) []string {
	t.Helper()
	return shipHz(t, bkt, node, 49, spans...)
}

// shipHz is ship with samples taken at hz.
func shipHz(t *testing.T, bkt objstore.Bucket, node string, hz int, spans ...[2]time.Time) []string {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Node: node, Source: node, CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spans {
		g := synth.New(synth.Config{CPUs: 2, Hz: hz, Start: sp[0].UnixNano(), Seconds: sp[1].Sub(sp[0]).Seconds(), Seed: seed.Add(1), Processes: 8, Stacks: 200,
			Unwind: true})
		if _, err := db.Import(node, sample.PeriodOf(int64(hz)), func(fn func(*sample.Sample) error) error { return g.Feed(fn) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ids := miniotest.UploadBlocks(t, bkt, node, dir)
	if len(ids) != len(spans) {
		t.Fatalf("node %s: %d blocks for %d spans", node, len(ids), len(spans))
	}
	return ids
}

// span is [start, start+d).
func span(start time.Time, d time.Duration) [2]time.Time { return [2]time.Time{start, start.Add(d)} }

// clock is a settable test clock.
type clock struct{ t atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.t.Store(t.UnixNano()); return c }
func (c *clock) now() time.Time   { return time.Unix(0, c.t.Load()) }
func (c *clock) add(d time.Duration) {
	c.t.Add(int64(d))
}

// faultyBucket fails uploads whose name ends in failSuffix while it is set:
// the compactor dies at that point of a pass, as a killed process would.
type faultyBucket struct {
	*bucket.Bucket
	failSuffix atomic.Pointer[string]
}

func (b *faultyBucket) Upload(ctx context.Context, name string, r io.Reader, opts ...objstore.ObjectUploadOption) error {
	if s := b.failSuffix.Load(); s != nil && strings.HasSuffix(name, *s) {
		return fmt.Errorf("injected crash before uploading %s", name)
	}
	return b.Bucket.Upload(ctx, name, r, opts...)
}

// objects lists every object under the bucket's prefix.
func objects(t *testing.T, bkt objstore.Bucket) []string {
	t.Helper()
	var names []string
	if err := bkt.Iter(context.Background(), "", func(n string) error {
		names = append(names, n)
		return nil
	}, objstore.WithRecursiveIter()); err != nil {
		t.Fatal(err)
	}
	return names
}

func countSuffix(names []string, suffix string) int {
	n := 0
	for _, s := range names {
		if strings.HasSuffix(s, suffix) {
			n++
		}
	}
	return n
}

// framePointerFrames counts the frames of db's samples found with frame
// pointers in a table walk.
func framePointerFrames(t *testing.T, db *store.Reader) int {
	t.Helper()
	n := 0
	if _, err := db.Select(context.Background(), store.Range{From: 0, To: 1 << 62}, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
		for _, i := range b.Rows {
			for _, id := range b.T.StackOf(b.T.Stack[i]) {
				if b.T.Frames[id].Method == sample.MethodFP {
					n++
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// liveBlocks reads the bucket index and returns the metas of its blocks
// that no deletion mark names: what queries read after compaction.
func liveBlocks(t *testing.T, bkt objstore.Bucket) []store.Meta {
	t.Helper()
	ix, err := bucketindex.Read(context.Background(), bkt)
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string]bool{}
	for _, m := range ix.DeletionMarks {
		marked[m.ID] = true
	}
	var live []store.Meta
	for _, b := range ix.Blocks {
		if !marked[b.ID] {
			live = append(live, b)
		}
	}
	return live
}
