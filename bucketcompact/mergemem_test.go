package bucketcompact

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/internal/heappeak"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// shipChurn writes blocks 2-minute blocks of node from start, perBlock
// samples each, as an agent under heavy process churn records them (every
// sample a process, command, cgroup and leaf frame of its own:
// synth.ChurnSample), and uploads them as a shipper does.
func shipChurn(t *testing.T, bkt objstore.Bucket, node string, start time.Time, blocks, perBlock int) {
	t.Helper()
	const block = 2 * time.Minute
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Node: node, Source: node, BlockDuration: block, CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	callers := synth.ChurnCallers(16)
	pid := uint32(100_000)
	for i := range blocks {
		t0 := start.Add(time.Duration(i) * block)
		_, err := db.Import(node, int64(time.Second/99), func(fn func(*sample.Sample) error) error {
			for j := range perBlock {
				pid++
				s := synth.ChurnSample(pid, t0.Add(time.Duration(j)*block/time.Duration(perBlock)).UnixNano(), callers[:4+j%12])
				if err := fn(&s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := miniotest.UploadBlocks(t, bkt, node, dir); len(ids) != blocks {
		t.Fatalf("node %s: %d blocks uploaded, want %d", node, len(ids), blocks)
	}
}

// bucketBlock is a block in the bucket with its index bytes.
type bucketBlock struct {
	meta       store.Meta
	indexBytes int64
}

// bucketBlocks reads every complete block of bkt, marked ones too, with
// its index bytes read from its table of contents (store.IndexBytes), by
// key, and checks that a meta that records them says the same.
func bucketBlocks(t *testing.T, bkt objstore.Bucket) map[string]bucketBlock {
	t.Helper()
	ctx := context.Background()
	src := bucketstore.New(bkt, "test bucket", bucketstore.Options{})
	keys, err := src.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bucketBlock{}
	for _, k := range keys {
		m, err := src.Meta(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		d, err := src.Open(ctx, k, m)
		if err != nil {
			t.Fatal(err)
		}
		n, err := store.IndexBytes(d, m)
		d.Close()
		if err != nil {
			t.Fatalf("block %s: %v", k, err)
		}
		if m.IndexBytes != 0 && m.IndexBytes != n {
			t.Errorf("block %s: meta.json says %d bytes of index, its table of contents %d", k, m.IndexBytes, n)
		}
		out[k] = bucketBlock{m, n}
	}
	return out
}

// TestTwoHourWindowUnderChurnIsBounded uploads to a real MinIO a 2-hour
// window of 2-minute blocks recorded under heavy churn (as the store's
// TestTwoHourMergeUnderChurnIsBounded writes them) and checks the
// compactor's pass over it: its merges take on runs of consecutive blocks
// whose index sections stay within store.MaxMergedIndexBytes, and its peak
// heap is bounded by a constant, whatever the window's threads and stacks.
// Merging the whole window into one block, as the compactor did when it
// bounded merges by data bytes only, took 82.8 to 83.1 MB here.
func TestTwoHourWindowUnderChurnIsBounded(t *testing.T) {
	const (
		blocks   = 60
		perBlock = 3000
		// A merge takes on at most MaxMergedIndexBytes of index and holds
		// about ten times that at peak (the store's figure); the pass adds
		// its downloads' and uploads' buffers.
		peakBound = 16 * store.MaxMergedIndexBytes
	)
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("fleet")}
	shipChurn(t, bkt, "node-a", day().Add(2*time.Hour), blocks, perBlock)
	// Every other block as written before metas recorded their index
	// bytes: the compactor reads those from the block's table of contents.
	var parentsIndex int64
	older := 0
	for k, b := range bucketBlocks(t, bkt) {
		parentsIndex += b.indexBytes
		if b.meta.IndexBytes == 0 {
			t.Fatalf("block %s: no index bytes in its meta", k)
		}
		if older < blocks/2 {
			older++
			b.meta.IndexBytes = 0
			raw, err := json.Marshal(b.meta)
			if err != nil {
				t.Fatal(err)
			}
			blk, err := bucketlayout.ParseBlockKey(k)
			if err != nil {
				t.Fatal(err)
			}
			if err := bkt.Upload(context.Background(), blk.Object(bucketlayout.MetaFile), bytes.NewReader(raw)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if parentsIndex < 2*store.MaxMergedIndexBytes {
		t.Fatalf("%d blocks with %d bytes of index, want at least twice the merge bound: the test would test nothing", blocks, parentsIndex)
	}
	c := newCompactor(t, bkt, newClock(time.Now()), Options{})
	var rep Report
	peak := heappeak.During(func() { rep = run(t, c) })
	if heads := c.stats.heads.Load(); heads != blocks/2 {
		t.Errorf("the pass read %d blocks' tables of contents, want the %d whose meta does not record their index bytes", heads, blocks/2)
	}
	after := bucketBlocks(t, bkt)
	replaced := map[string]bool{}
	for _, b := range after {
		for _, p := range b.meta.Parents {
			replaced["node-a/"+p] = true
		}
	}
	samples, left := 0, 0
	for k, b := range after {
		if replaced[k] {
			continue
		}
		left++
		samples += b.meta.Samples
		if len(b.meta.Parents) == 0 {
			continue
		}
		var taken int64
		for _, p := range b.meta.Parents {
			taken += after["node-a/"+p].indexBytes
		}
		// A merged block's ids are longer varints than its parents':
		// its index may pass what they had by a little (4.13 MiB of 4 in
		// the store's test), not by an eighth.
		if taken > store.MaxMergedIndexBytes || b.indexBytes > store.MaxMergedIndexBytes*9/8 {
			t.Errorf("merged block %s took on %d parents with %d bytes of index and has %d, want at most %d taken on", k, len(b.meta.Parents), taken, b.indexBytes, store.MaxMergedIndexBytes)
		}
	}
	t.Logf("%d blocks of %d samples, their index sections %.1f MB uncompressed: %d merges of %d parents, %d blocks after; peak heap of the pass %.1f MB (bound %.0f MB)",
		blocks, perBlock, float64(parentsIndex)/(1<<20), rep.Merges, rep.MergedParents, left, float64(peak)/(1<<20), float64(peakBound)/(1<<20))
	if samples != blocks*perBlock {
		t.Fatalf("%d samples in the blocks after the pass, want %d", samples, blocks*perBlock)
	}
	// Runs of consecutive blocks, each within the bound: the fewest blocks
	// the bound allows, give or take one.
	if most := int(2*parentsIndex/store.MaxMergedIndexBytes) + 1; rep.Merges < 2 || left > most {
		t.Errorf("%d merges left %d blocks, want runs within the bound: 2 merges or more, at most %d blocks for %d bytes of index", rep.Merges, left, most, parentsIndex)
	}
	if peak > peakBound {
		t.Errorf("the compactor's pass over a 2-hour window under churn took %.1f MB of heap at peak, want at most %.0f MB", float64(peak)/(1<<20), float64(peakBound)/(1<<20))
	}
}
