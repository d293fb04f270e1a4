package store

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Compaction merges small blocks of one source into larger ones, so that a
// month of data is a few dozen blocks: blocks that fall inside one aligned
// window of the next level's width are merged into one block of that level.
// The levels' widths are multiples of the head's block duration (2 min by
// default): 2 min, 20 min, 2 h, 12 h.
var levelFactors = []int64{1, 10, 60, 360}

// maxCompactedSamples bounds a compacted block. The merge streams, so this
// bounds the block's size on disk and the time a chunk scan may take, not
// memory.
const maxCompactedSamples = 200_000_000

// MaxMergedIndexBytes bounds the index sections (uncompressed: strings,
// frames, stacks, threads, both summaries and cgroups) of the blocks one
// merge takes on, and so its memory: the merge builds the merged tables
// and summaries in memory, since they are written after the chunks, and
// they can be as large as its parents' together (under process churn
// nothing repeats: a thread, a command, a cgroup and often a stack per
// process). TestTwoHourMergeUnderChurnIsBounded measures about ten times
// these bytes at peak. A merged block's index is also what a query must
// hold to read it, so the bound keeps every block's index small enough
// for the index cache. A window whose blocks pass the bound is merged in
// runs of consecutive blocks within it: a node under heavy churn keeps
// more, smaller blocks instead of spiking by hundreds of MB every 2 or 12
// hours. The bucket compactor (package bucketcompact) keeps to it too.
const MaxMergedIndexBytes = 4 << 20

// IndexBytes reads the table of contents of a block's data d, whose meta
// is m, and returns the uncompressed size of the block's index sections:
// what a merge that takes the block on must bound, as the store's own
// compaction does with MaxMergedIndexBytes. It reads the data's head,
// trailer and table of contents only (a few hundred bytes): for blocks
// whose meta does not record them (Meta.IndexBytes).
func IndexBytes(d BlockData, m Meta) (int64, error) {
	b := &Block{Meta: m}
	if err := b.readTOC(d); err != nil {
		return 0, fmt.Errorf("table of contents: %w", err)
	}
	return b.indexBytes(), nil
}

// indexBytes is the uncompressed size of a block's index sections.
func (b *Block) indexBytes() int64 { return indexBytesOf(b.sections) }

// indexBytesOf is the uncompressed size of the index sections of a table
// of contents: all but the chunks and the chunk index.
func indexBytesOf(sections [numSections + 1]section) int64 {
	n := int64(0)
	for kind, s := range sections {
		if kind != sectionChunks {
			n += int64(s.raw)
		}
	}
	return n
}

// compact runs one compaction plan after another, as at time now, until
// none is left.
func (db *DB) compact(now time.Time) error {
	for {
		plan := db.planCompaction(now)
		if len(plan) == 0 {
			return nil
		}
		if err := db.merge(plan); err != nil {
			return err
		}
	}
}

// planCompaction returns blocks to merge: two or more blocks of one source,
// all inside one aligned window at some level above theirs, in a window
// that has closed (its end is older than the newest data plus one head).
func (db *DB) planCompaction(now time.Time) []*Block {
	db.mu.RLock()
	defer db.mu.RUnlock()
	base := int64(db.opts.BlockDuration)
	for level := len(levelFactors) - 1; level >= 1; level-- {
		width := base * levelFactors[level]
		groups := map[string][]*Block{}
		waiting := map[string]bool{}
		for _, b := range db.blocks {
			if b.Meta.Level > level {
				continue
			}
			start := floorDiv(b.Meta.MinTime, width) * width
			if b.Meta.MaxTime >= start+width {
				continue // straddles the window
			}
			// Recorded windows must have closed; imports are complete.
			if b.Meta.ImportedAt == 0 && start+width > now.UnixNano()-base {
				continue
			}
			// Blocks taken at different periods stay apart: a block
			// states one period, what each of its samples weighs. So do
			// blocks of different instances (a block states one).
			key := fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d\x00%d", b.Meta.Node, b.Meta.Instance, b.Meta.Source, start, b.Meta.PeriodNs, b.Meta.ClockShift)
			if db.unshipped(b) {
				waiting[key] = true // merged once shipped: the bucket gets every block cut
			}
			groups[key] = append(groups[key], b)
		}
		for key := range waiting {
			delete(groups, key)
		}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if run := mergeRun(groups[k], db.maxMergedIndexBytes); run != nil {
				return run
			}
		}
	}
	return nil
}

// mergeRun returns the first run of two or more blocks of one window,
// consecutive in time, whose samples and index bytes together stay within
// the bounds of a merge (MergeRun); nil if there is none.
func mergeRun(window []*Block, maxIndexBytes int64) []*Block {
	window = slices.Clone(window)
	slices.SortStableFunc(window, func(a, b *Block) int { return cmp.Compare(a.Meta.MinTime, b.Meta.MinTime) })
	sizes := make([]MergeSize, len(window))
	for i, b := range window {
		sizes[i] = MergeSize{Samples: int64(b.Meta.Samples), IndexBytes: b.indexBytes()}
	}
	start, end := MergeRun(sizes, MergeSize{Bytes: math.MaxInt64, Samples: maxCompactedSamples, IndexBytes: maxIndexBytes})
	if end == 0 {
		return nil
	}
	return window[start:end]
}

// MergeSize is what a block brings to a merge, in each measure a merge
// bounds: its data's bytes, its samples, and its index sections' bytes
// (uncompressed, Meta.IndexBytes).
type MergeSize struct {
	Bytes, Samples, IndexBytes int64
}

// MergeRun plans a merge within one window of blocks, given their sizes in
// time order: it returns the first run sizes[start:end] of two or more
// consecutive blocks whose sizes, summed, stay within limit in every
// measure, and 0, 0 when there is none. A window within the limit is one
// run; a block over the limit on its own is never merged. Both the data
// directory's compaction and the bucket compactor plan with it.
func MergeRun(sizes []MergeSize, limit MergeSize) (start, end int) {
	var sum MergeSize
	for i, s := range sizes {
		if sum.Bytes+s.Bytes > limit.Bytes || sum.Samples+s.Samples > limit.Samples || sum.IndexBytes+s.IndexBytes > limit.IndexBytes {
			if i-start >= 2 {
				return start, i
			}
			start, sum = i, MergeSize{}
		}
		sum.Bytes += s.Bytes
		sum.Samples += s.Samples
		sum.IndexBytes += s.IndexBytes
	}
	if len(sizes)-start >= 2 {
		return start, len(sizes)
	}
	return 0, 0
}

// merge writes the samples of blocks as one block, then deletes them.
func (db *DB) merge(blocks []*Block) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	metas := make([]Meta, len(blocks))
	for i, b := range blocks {
		metas[i] = b.Meta
	}
	merged, err := mergedMeta(metas)
	if err != nil {
		return err // plan groups blocks by period: not reached
	}
	defer db.upkeepUnit()(time.Duration(merged.MaxTime - merged.MinTime))
	peakOpen := 0
	meta, err := writeBlockFrom(filepath.Join(db.dir, blocksDir), merged, nil, func(w *blockWriter) (err error) {
		peakOpen, err = mergeInTimeOrder(blocks, w)
		return err
	})
	if err != nil {
		return fmt.Errorf("compact %d blocks: %w", len(blocks), err)
	}
	if err := db.addBlock(meta, nil, blocks); err != nil {
		return err
	}
	for _, b := range blocks {
		db.retire(b)
		os.RemoveAll(b.Dir)
	}
	db.compactions.Add(1)
	db.notePeakOpen(peakOpen)
	db.log.Debug("compacted blocks", "into", meta.ID, "parents", len(blocks), "open at once", peakOpen, "samples", meta.Samples, "level", meta.Level)
	return nil
}

// notePeakOpen records that a compaction held n parents open at once.
func (db *DB) notePeakOpen(n int) {
	for {
		old := db.mergePeakOpen.Load()
		if int64(n) <= old || db.mergePeakOpen.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}

// blockCursor walks one block's samples in time order, a chunk at a time.
type blockCursor struct {
	b     *Block
	ix    *blockIndex // read with the first chunk, past the index cache
	chunk int
	t     *Table
	m     *remap
	order []int32
	pos   int
}

func (c *blockCursor) next() (bool, error) {
	c.pos++
	for c.t == nil || c.pos >= len(c.order) {
		if c.chunk >= len(c.b.chunks) {
			return false, nil
		}
		if c.ix == nil {
			ix, err := c.b.readIndex()
			if err != nil {
				return false, &BlockError{Key: c.b.key, Err: err}
			}
			c.ix = ix
		}
		t, err := c.b.readChunk(c.ix, c.chunk)
		if err != nil {
			return false, &BlockError{Key: c.b.key, Err: err}
		}
		c.chunk++
		if c.m == nil {
			c.m = newRemap(t)
		} else {
			c.m.src = t
		}
		c.t, c.pos = t, 0
		c.order = c.order[:0]
		for i := range t.Len() {
			c.order = append(c.order, int32(i))
		}
		slices.SortStableFunc(c.order, func(a, b int32) int { return cmp.Compare(t.Time[a], t.Time[b]) })
	}
	return true, nil
}

func (c *blockCursor) time() int64 { return c.t.Time[c.order[c.pos]] }

// mergeInTimeOrder feeds the samples of blocks to w in time order (a k-way
// merge: blocks of one window rarely overlap, but may after a restart or an
// import). It opens a parent, reading its index, only once the merge has
// reached the parent's first sample, and lets it go when its last sample is
// written: parents that do not overlap in time are read one at a time, so
// a merge holds one parent's index, not all of them, beside the merged
// one. It returns how many parents it held open at once at most.
func mergeInTimeOrder(blocks []*Block, w *blockWriter) (peakOpen int, err error) {
	pending := slices.Clone(blocks)
	slices.SortStableFunc(pending, func(a, b *Block) int { return cmp.Compare(a.Meta.MinTime, b.Meta.MinTime) })
	var cursors []*blockCursor
	// open opens the next pending parent, if any; a parent without a
	// sample is passed over.
	open := func() error {
		b := pending[0]
		pending = pending[1:]
		c := &blockCursor{b: b, pos: -1}
		ok, err := c.next()
		if err != nil {
			return err
		}
		if ok {
			cursors = append(cursors, c)
			peakOpen = max(peakOpen, len(cursors))
		}
		return nil
	}
	for len(cursors) > 0 || len(pending) > 0 {
		if len(cursors) == 0 {
			if err := open(); err != nil {
				return peakOpen, err
			}
			continue
		}
		best := 0
		for i, c := range cursors {
			if c.time() < cursors[best].time() {
				best = i
			}
		}
		// A parent whose samples may come first joins the merge before
		// the next sample is written. One that starts at the same time
		// waits: samples of equal time may be written in either order,
		// and consecutive blocks often share the cut's instant (every
		// CPU samples at once), so waiting keeps one parent open.
		if len(pending) > 0 && pending[0].Meta.MinTime < cursors[best].time() {
			if err := open(); err != nil {
				return peakOpen, err
			}
			continue
		}
		c := cursors[best]
		if err := w.add(c.m, int(c.order[c.pos])); err != nil {
			return peakOpen, err
		}
		ok, err := c.next()
		if err != nil {
			return peakOpen, err
		}
		if !ok {
			cursors = slices.Delete(cursors, best, best+1)
		}
	}
	return peakOpen, nil
}
