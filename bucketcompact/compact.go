// Package bucketcompact maintains a bucket of heatscope blocks: the job
// of the Thanos compactor, for the layout of store/FORMAT.md ("Bucket
// layout"). One pass
//
//   - deletes the blocks whose deletion mark is older than the delete delay
//     (meta.json first, so the block stops being listed as complete, then
//     its data, then the mark), and partial uploads (data, no meta) older
//     than the partial age;
//   - marks for deletion the blocks a merged block replaces, the blocks
//     older than the retention, and the oldest blocks while the bucket's
//     blocks take more than the size limit;
//   - merges each node's small blocks into larger ones: the blocks of one
//     node and one source inside one aligned, closed window of a range
//     (2 h, then 24 h by default), consecutive in time while their index
//     sections stay within the store's bound (store.MaxMergedIndexBytes),
//     are downloaded into the work directory, merged by the store's
//     streaming k-way merge, and uploaded as one block (data first,
//     meta.json last, so readers see all of it or none); then its parents
//     are marked for deletion;
//   - writes the bucket index (package bucketindex).
//
// Readers never fail because of it: a merged block lists its parents, and
// a reader that lists it stops reading them at once (store.DB does), while
// a query already reading a parent has the delete delay to finish; a block
// marked by retention is still read until it is deleted.
//
// One compactor runs per bucket. It holds a lock object
// ("compactor-lock.json", lock.go), taken and renewed with conditional
// writes where the provider has them, so that of two compactors started
// at the same instant exactly one runs, and a compactor that dies is
// replaced within the lock's time to live.
package bucketcompact

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/store"
)

// Options configure a Compactor.
type Options struct {
	// WorkDir holds the blocks being merged (required). It is emptied at
	// the start of each merge.
	WorkDir string
	// Ranges are the widths of the aligned windows whose blocks are merged
	// into one, smallest first (default 2 h, 24 h). A block goes into the
	// widest window that has closed and that it fits in.
	Ranges []time.Duration
	// ShipDelay is how long after a window ends its blocks may still be
	// uploaded (default 15 min): a window is merged only after that.
	ShipDelay time.Duration
	// Retention deletes blocks whose newest sample is older (0: keep).
	Retention time.Duration
	// RetentionBytes deletes the oldest blocks while all blocks take more
	// bytes (0: no limit).
	RetentionBytes int64
	// DeleteDelay is how long a marked block stays readable (0: the
	// default, 2 h).
	DeleteDelay time.Duration
	// PartialAge is how old a partial upload (data without meta.json) must
	// be before it is deleted (default 48 h): a recorder whose bucket was
	// away may still be retrying it.
	PartialAge time.Duration
	// MaxBlockBytes bounds a merged block's data (default 1 GiB).
	MaxBlockBytes int64
	// Holder names this compactor in its lock (default host:pid).
	Holder string
	// LockTTL is how long the lock stays valid without being renewed
	// (default 2 min): its holder renews it every LockTTL/4 (KeepLock, and
	// each pass), another compactor takes it over once it is that old.
	LockTTL time.Duration
	Logger  *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

// Defaults.
const (
	DefaultDeleteDelay = 2 * time.Hour
	DefaultShipDelay   = 15 * time.Minute
	DefaultPartialAge  = 48 * time.Hour
	DefaultLockTTL     = 2 * time.Minute
	// maxMergedSamples bounds a merged block, as the store's compaction does.
	maxMergedSamples = 200_000_000
)

// DefaultRanges are the windows merged by default.
var DefaultRanges = []time.Duration{2 * time.Hour, 24 * time.Hour}

// Compactor maintains one bucket. Run one pass at a time.
type Compactor struct {
	bkt  objstore.Bucket
	name string
	opts Options
	log  *slog.Logger

	// metas and marks cache what never changes; corrupt names blocks
	// skipped, with why.
	metas   map[string]store.Meta
	marks   map[string]bucketindex.DeletionMark
	corrupt map[string]string
	// implied holds when each block a merged block replaced was first
	// found replaced (Unix ms): its deletion time (markReplaced).
	implied map[string]int64
	// indexBytes holds each block's index bytes read (readIndexBytes),
	// which never change.
	indexBytes map[string]int64

	// locks reads and writes the lock object; lockMu guards the version
	// of it this compactor wrote last ("" while it holds none), when, and
	// its token.
	locks       lockObjects
	lockMu      sync.Mutex
	lockVersion string
	lockRenewed time.Time
	lockToken   string

	stats counters
}

type counters struct {
	passes, failedPasses, merges, mergedParents    atomic.Uint64
	indexUpdates                                   atomic.Uint64
	marked, deleted, partialDeleted, corrupt       atomic.Uint64
	lists, gets, heads, puts, deletes, uploadBytes atomic.Uint64
	dlBytes                                        atomic.Uint64
	blocks, bucketBytes, indexBytes, lastSuccess   atomic.Int64
	lockHeld                                       atomic.Int64
}

// New returns a compactor for bkt; name names the bucket in messages.
func New(bkt objstore.Bucket, name string, opts Options) (*Compactor, error) {
	if opts.WorkDir == "" {
		return nil, errors.New("compact: no work directory")
	}
	if len(opts.Ranges) == 0 {
		opts.Ranges = DefaultRanges
	}
	for i, r := range opts.Ranges {
		if r <= 0 || (i > 0 && r%opts.Ranges[i-1] != 0) {
			return nil, fmt.Errorf("compact: ranges %v: each must be positive and a multiple of the one before", opts.Ranges)
		}
	}
	if opts.ShipDelay <= 0 {
		opts.ShipDelay = DefaultShipDelay
	}
	if opts.DeleteDelay < 0 || opts.Retention < 0 || opts.RetentionBytes < 0 {
		return nil, errors.New("compact: delete delay, retention and retention size must not be negative")
	}
	if opts.DeleteDelay == 0 {
		opts.DeleteDelay = DefaultDeleteDelay
	}
	if opts.PartialAge <= 0 {
		opts.PartialAge = DefaultPartialAge
	}
	if opts.MaxBlockBytes <= 0 {
		opts.MaxBlockBytes = 1 << 30
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = DefaultLockTTL
	}
	if opts.Holder == "" {
		host, _ := os.Hostname()
		opts.Holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Compactor{bkt: bkt, name: name, opts: opts, log: opts.Logger,
		metas: map[string]store.Meta{}, marks: map[string]bucketindex.DeletionMark{}, corrupt: map[string]string{},
		implied: map[string]int64{}, indexBytes: map[string]int64{},
		locks: lockStore(bkt, opts.Logger, name), lockToken: newToken()}, nil
}

// Report says what one pass did.
type Report struct {
	Nodes, Blocks int   // complete blocks after the pass, marked ones included
	Bytes         int64 // their data
	Merges        int   // merged blocks uploaded
	MergedParents int
	// Marked counts the deletion marks written, by reason.
	Marked         map[string]int
	Deleted        int // marked blocks deleted
	PartialDeleted int // partial uploads deleted
	// Corrupt names the blocks skipped as unreadable, with why.
	Corrupt    []string
	IndexBytes int
}

// Run makes one pass over the bucket. A failure of the bucket ends the
// pass with an error that names the bucket and the operation; what the
// pass did before stays done and the next pass goes on from there.
func (c *Compactor) Run(ctx context.Context) (Report, error) {
	c.stats.passes.Add(1)
	rep, err := c.run(ctx)
	if err != nil {
		c.stats.failedPasses.Add(1)
		return rep, err
	}
	c.stats.lastSuccess.Store(c.opts.Now().Unix())
	return rep, nil
}

// listing is what a pass starts from: the lock taken, the bucket listed
// at now, the blocks merged blocks replaced marked.
type listing struct {
	now      time.Time
	blocks   []*blockObj
	segments []bucketindex.Segment
}

func (c *Compactor) list(ctx context.Context, rep *Report) (listing, error) {
	if err := c.lock(ctx); err != nil {
		return listing{}, err
	}
	l := listing{now: c.opts.Now()}
	var err error
	if l.blocks, l.segments, err = c.scan(ctx); err != nil {
		return listing{}, fmt.Errorf("scan: %w", err)
	}
	c.forgetGone(l.blocks)
	c.markReplaced(l.blocks, l.now, rep, false)
	return l, nil
}

// forgetGone drops what the compactor keeps of each block (its meta, its
// deletion mark, when it was found replaced, why it is corrupt, its index
// bytes) for the blocks the listing no longer holds: deleted by another
// compactor, by hand, or by a lifecycle rule. deleteBlock drops its own;
// without this a long-running compactor would keep the others forever.
func (c *Compactor) forgetGone(blocks []*blockObj) {
	listed := make(map[string]bool, len(blocks))
	for _, b := range blocks {
		listed[b.key()] = true
	}
	gone := func(k string) bool { return !listed[k] }
	maps.DeleteFunc(c.metas, func(k string, _ store.Meta) bool { return gone(k) })
	maps.DeleteFunc(c.marks, func(k string, _ bucketindex.DeletionMark) bool { return gone(k) })
	maps.DeleteFunc(c.implied, func(k string, _ int64) bool { return gone(k) })
	maps.DeleteFunc(c.corrupt, func(k string, _ string) bool { return gone(k) })
	maps.DeleteFunc(c.indexBytes, func(k string, _ int64) bool { return gone(k) })
}

func (c *Compactor) run(ctx context.Context) (Report, error) {
	rep := Report{Marked: map[string]int{}}
	l, err := c.list(ctx, &rep)
	if err != nil {
		return rep, err
	}
	now, blocks := l.now, l.blocks
	// 1. Delete what is due: marked blocks past the delay, in the order
	// they were marked (a block merged away goes before the block that
	// replaced it, should that be due too: a pass cut short never leaves
	// a parent without the merged block that marks it), and old partials.
	var due []*blockObj
	kept := blocks[:0]
	for _, b := range blocks {
		switch {
		case b.mark != nil && now.Sub(time.UnixMilli(b.mark.DeletionTime)) >= c.opts.DeleteDelay:
			due = append(due, b)
			continue
		case b.mark == nil && !b.hasMeta && now.Sub(b.newest) >= c.opts.PartialAge:
			c.log.Warn("deleting a partial upload", "bucket", c.name, "block", b.key(), "lastWritten", b.newest)
			if err := c.deleteBlock(ctx, b); err != nil {
				return rep, err
			}
			rep.PartialDeleted++
			c.stats.partialDeleted.Add(1)
			continue
		}
		kept = append(kept, b)
	}
	blocks = kept
	slices.SortStableFunc(due, func(a, b *blockObj) int { return cmp.Compare(a.mark.DeletionTime, b.mark.DeletionTime) })
	for _, b := range due {
		if err := c.deleteBlock(ctx, b); err != nil {
			return rep, err
		}
		rep.Deleted++
	}
	// 2. Retention.
	if err := c.applyRetention(ctx, blocks, now, &rep); err != nil {
		return rep, err
	}
	// 3. Merge.
	for {
		plan, err := c.plan(ctx, blocks, now)
		if err != nil {
			return rep, err
		}
		if len(plan) == 0 {
			break
		}
		merged, err := c.merge(ctx, plan)
		var be *store.BlockError
		if errors.As(err, &be) && !errors.Is(err, store.ErrUnavailable) {
			c.markCorrupt(bucketlayout.Block{Node: plan[0].node, ID: be.Key}.Key(), be.Err)
			continue // plan again without it
		}
		if err != nil {
			return rep, err
		}
		rep.Merges++
		rep.MergedParents += len(plan)
		blocks = append(blocks, merged)
		c.markReplaced(blocks, c.opts.Now(), &rep, true)
	}
	// 4. The index.
	if err := c.writeIndex(ctx, blocks, l.segments, now, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// UpdateIndex rewrites the bucket index from a fresh listing, without
// deleting, marking or merging anything: what the compactor does between
// passes (heatscope compact --index-interval), so that query services
// reading the index follow new uploads within seconds.
func (c *Compactor) UpdateIndex(ctx context.Context) (Report, error) {
	rep := Report{Marked: map[string]int{}}
	l, err := c.list(ctx, &rep)
	if err != nil {
		return rep, err
	}
	if err := c.writeIndex(ctx, l.blocks, l.segments, l.now, &rep); err != nil {
		return rep, err
	}
	c.stats.indexUpdates.Add(1)
	return rep, nil
}

// writeIndex writes the bucket index of a pass that listed the bucket at
// listedAt.
func (c *Compactor) writeIndex(ctx context.Context, blocks []*blockObj, segments []bucketindex.Segment, listedAt time.Time, rep *Report) error {
	ix := bucketindex.Index{UpdatedAt: c.opts.Now().UnixMilli(), ListedAt: listedAt.UnixMilli(), Segments: segments}
	nodeSet := map[string]bool{}
	for _, b := range blocks {
		why, bad := c.corrupt[b.key()]
		if b.hasMeta && !b.hasData && !bad {
			why, bad = "meta.json without data", true
		}
		if bad && b.hasMeta {
			ix.Corrupt = append(ix.Corrupt, bucketindex.CorruptBlock{Node: b.node, ID: b.id, Reason: why, Meta: b.meta})
		}
		if bad || b.meta == nil {
			continue
		}
		ix.Blocks = append(ix.Blocks, *b.meta)
		nodeSet[b.node] = true
		rep.Bytes += b.meta.Bytes
		if b.mark != nil {
			ix.DeletionMarks = append(ix.DeletionMarks, *b.mark)
		}
	}
	slices.SortFunc(ix.Blocks, func(a, b store.Meta) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	slices.SortFunc(ix.Corrupt, func(a, b bucketindex.CorruptBlock) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(ix.DeletionMarks, func(a, b bucketindex.DeletionMark) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(ix.Segments, func(a, b bucketindex.Segment) int { return cmp.Compare(a.Name, b.Name) })
	if err := c.checkLock(); err != nil {
		return err
	}
	n, err := bucketindex.Write(ctx, c.bkt, ix)
	if err != nil {
		return err
	}
	c.stats.puts.Add(1)
	rep.IndexBytes = n
	rep.Nodes, rep.Blocks = len(nodeSet), len(ix.Blocks)
	for k, why := range c.corrupt {
		rep.Corrupt = append(rep.Corrupt, k+": "+why)
	}
	slices.Sort(rep.Corrupt)
	c.stats.blocks.Store(int64(rep.Blocks))
	c.stats.bucketBytes.Store(rep.Bytes)
	c.stats.indexBytes.Store(int64(n))
	return nil
}

// live reports whether b is a complete block that is not marked or corrupt.
func (c *Compactor) live(b *blockObj) bool {
	_, bad := c.corrupt[b.key()]
	return b.meta != nil && b.hasData && b.mark == nil && !bad
}

func (c *Compactor) markCorrupt(key string, err error) {
	if _, ok := c.corrupt[key]; ok {
		return
	}
	c.corrupt[key] = err.Error()
	c.stats.corrupt.Add(1)
	c.log.Warn("skipping a corrupt block", "bucket", c.name, "block", key, "err", err)
}

// markReplaced marks the blocks that a complete block of their node lists
// as parents, without writing anything: the merged block's meta.json,
// uploaded last, is their deletion mark, made when the merged block was
// uploaded (its object's time in the listing; the time of the merge for a
// block this compactor just merged). So a merge costs no request beyond
// its block's two uploads, there is no window where the merged block is
// visible and its parents unmarked, and a pass that dies after the upload
// leaves nothing to repair. One deletion-mark.json a parent (as Thanos
// writes) would cost a PUT a parent: docs/design.md ("10,000 nodes").
// merged says that a block of blocks was merged by this pass: the marks
// its parents get are counted in rep as made by this pass, where the
// marks of the blocks merged by earlier passes (or compactors) are only
// found.
func (c *Compactor) markReplaced(blocks []*blockObj, now time.Time, rep *Report, merged bool) {
	byKey := map[string]*blockObj{}
	for _, b := range blocks {
		byKey[b.key()] = b
	}
	for _, b := range blocks {
		if b.meta == nil || !b.hasData {
			continue
		}
		for _, p := range b.meta.Parents {
			pb := byKey[bucketlayout.Block{Node: b.node, ID: p}.Key()]
			if pb == nil || pb.mark != nil {
				continue
			}
			at, known := c.implied[pb.key()]
			if !known {
				at = b.newest.UnixMilli()
				if b.newest.IsZero() || b.newest.After(now) {
					at = now.UnixMilli() // the provider gave no time: the delay runs from now
				}
				c.implied[pb.key()] = at
				if merged {
					rep.Marked["compacted"]++
					c.stats.marked.Add(1)
					c.log.Info("marked a block for deletion", "bucket", c.name, "block", pb.key(), "reason", "compacted", "replacedBy", b.id)
				}
			}
			pb.mark = &bucketindex.DeletionMark{Version: 1, Node: pb.node, ID: pb.id, DeletionTime: at, Reason: "compacted", ReplacedBy: b.id}
		}
	}
}

// applyRetention marks blocks older than the retention, then the oldest
// while the live blocks take more than the size limit.
func (c *Compactor) applyRetention(ctx context.Context, blocks []*blockObj, now time.Time, rep *Report) error {
	var live []*blockObj
	for _, b := range blocks {
		if c.live(b) {
			live = append(live, b)
		}
	}
	slices.SortFunc(live, func(a, b *blockObj) int {
		return cmp.Or(cmp.Compare(a.meta.MaxTime, b.meta.MaxTime), cmp.Compare(a.key(), b.key()))
	})
	var total int64
	for _, b := range live {
		total += b.meta.Bytes
	}
	for _, b := range live {
		reason := ""
		switch {
		case c.opts.Retention > 0 && time.Unix(0, b.meta.MaxTime).Before(now.Add(-c.opts.Retention)):
			reason = "retention-age"
		case c.opts.RetentionBytes > 0 && total > c.opts.RetentionBytes:
			reason = "retention-size"
		default:
			continue
		}
		if err := c.mark(ctx, b, reason, "", now, rep); err != nil {
			return err
		}
		total -= b.meta.Bytes
	}
	return nil
}

// mark uploads a block's deletion mark.
func (c *Compactor) mark(ctx context.Context, b *blockObj, reason, replacedBy string, now time.Time, rep *Report) error {
	if err := c.checkLock(); err != nil {
		return err
	}
	m := bucketindex.DeletionMark{Version: 1, Node: b.node, ID: b.id, DeletionTime: now.UnixMilli(), Reason: reason, ReplacedBy: replacedBy}
	raw, _ := json.MarshalIndent(m, "", "  ")
	c.stats.puts.Add(1)
	if err := c.bkt.Upload(ctx, b.object(bucketlayout.DeletionMarkFile), bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("mark block %s for deletion: %w", b.key(), err)
	}
	b.mark, b.markObj = &m, true
	c.marks[b.key()] = m
	rep.Marked[reason]++
	c.stats.marked.Add(1)
	c.log.Info("marked a block for deletion", "bucket", c.name, "block", b.key(), "reason", reason, "replacedBy", replacedBy)
	return nil
}

// deleteBlock deletes a block's objects: meta.json first (the block is no
// longer complete, readers stop listing it), then its data, then its
// mark, so that a pass cut short leaves a mark the next pass finishes.
func (c *Compactor) deleteBlock(ctx context.Context, b *blockObj) error {
	if err := c.checkLock(); err != nil {
		return err
	}
	files := []string{bucketlayout.MetaFile, bucketlayout.DataFile}
	if b.markObj {
		files = append(files, bucketlayout.DeletionMarkFile)
	}
	for _, f := range files {
		c.stats.deletes.Add(1)
		if err := c.bkt.Delete(ctx, b.object(f)); err != nil && !c.bkt.IsObjNotFoundErr(err) {
			return fmt.Errorf("delete block %s: %w", b.key(), err)
		}
	}
	delete(c.metas, b.key())
	delete(c.marks, b.key())
	delete(c.implied, b.key())
	delete(c.corrupt, b.key())
	delete(c.indexBytes, b.key())
	if b.mark != nil {
		c.stats.deleted.Add(1)
	}
	return nil
}

// plan returns the next blocks to merge: a run of two or more blocks of
// one node and source, consecutive in time, inside one aligned window of
// the widest range they fit in whose window has closed, within the merge's
// bounds (mergeRun). nil when nothing is left to merge. It reads the index
// bytes of the blocks of windows with two or more: a block whose table of
// contents is unreadable is marked corrupt and left out.
func (c *Compactor) plan(ctx context.Context, blocks []*blockObj, now time.Time) ([]*blockObj, error) {
	for i := len(c.opts.Ranges) - 1; i >= 0; i-- {
		width := c.opts.Ranges[i].Nanoseconds()
		groups := map[string][]*blockObj{}
		var keys []string
		for _, b := range blocks {
			if !c.live(b) {
				continue
			}
			start := floorDiv(b.meta.MinTime, width) * width
			if b.meta.MaxTime >= start+width || start+width > now.Add(-c.opts.ShipDelay).UnixNano() {
				continue // straddles the window, or it is still open
			}
			// Blocks taken at different sampling periods stay apart: a
			// block states one period, what each of its samples weighs.
			// So do two instances' blocks of one node (two recorders
			// given one name): merged, their samples could not be told
			// apart again; and imports placed by different clock shifts.
			k := fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d\x00%d", b.node, b.meta.Instance, b.meta.Source, start, b.meta.PeriodNs, b.meta.ClockShift)
			if groups[k] == nil {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], b)
		}
		slices.Sort(keys)
		for _, k := range keys {
			g := groups[k]
			if len(g) < 2 {
				continue
			}
			if err := c.readIndexBytes(ctx, g); err != nil {
				return nil, err
			}
			if run := c.mergeRun(slices.DeleteFunc(g, func(b *blockObj) bool { return !c.live(b) })); run != nil {
				slices.SortFunc(run, func(a, b *blockObj) int { return cmp.Compare(a.id, b.id) })
				return run, nil
			}
		}
	}
	return nil, nil
}

// mergeRun returns the first run of two or more blocks of one window,
// consecutive in time, whose data, samples and index sections together
// stay within the bounds of a merge (MaxBlockBytes, maxMergedSamples,
// store.MaxMergedIndexBytes: a merge builds the merged tables in memory,
// about ten times the index bytes it takes on; store.MergeRun); nil if
// there is none. The indexes' bytes must have been read (readIndexBytes).
func (c *Compactor) mergeRun(window []*blockObj) []*blockObj {
	window = slices.Clone(window)
	slices.SortStableFunc(window, func(a, b *blockObj) int { return cmp.Compare(a.meta.MinTime, b.meta.MinTime) })
	sizes := make([]store.MergeSize, len(window))
	for i, b := range window {
		sizes[i] = store.MergeSize{Bytes: b.meta.Bytes, Samples: int64(b.meta.Samples), IndexBytes: c.indexBytes[b.key()]}
	}
	start, end := store.MergeRun(sizes, store.MergeSize{Bytes: c.opts.MaxBlockBytes, Samples: maxMergedSamples, IndexBytes: store.MaxMergedIndexBytes})
	if end == 0 {
		return nil
	}
	return window[start:end]
}

// readIndexBytes reads the index bytes of the blocks not read before:
// their meta's (Meta.IndexBytes), or for a block written before metas
// recorded them, store.IndexBytes over its data object (a HEAD, then
// ranged GETs of its head, trailer and table of contents). A block it
// cannot read is marked corrupt, unless the bucket failed: then the pass
// ends.
func (c *Compactor) readIndexBytes(ctx context.Context, blocks []*blockObj) error {
	for _, b := range blocks {
		if _, ok := c.indexBytes[b.key()]; ok {
			continue
		}
		if n := b.meta.IndexBytes; n > 0 {
			c.indexBytes[b.key()] = n
			continue
		}
		d := &objectData{r: bucketlayout.RangeReader{Ctx: ctx, Bucket: c.bkt, Name: b.object(bucketlayout.DataFile), OnGet: func(int) { c.stats.gets.Add(1) }}}
		c.stats.heads.Add(1)
		attrs, err := c.bkt.Attributes(ctx, d.r.Name)
		switch {
		case c.bkt.IsObjNotFoundErr(err):
			c.markCorrupt(b.key(), fmt.Errorf("no data object: %w", err))
			continue
		case err != nil:
			return fmt.Errorf("read the size of block %s: %w", b.key(), err)
		case b.meta.Bytes > 0 && attrs.Size != b.meta.Bytes:
			c.markCorrupt(b.key(), fmt.Errorf("data is %d bytes, meta.json says %d", attrs.Size, b.meta.Bytes))
			continue
		}
		d.size = attrs.Size
		n, err := store.IndexBytes(d, *b.meta)
		switch {
		case d.err != nil:
			return fmt.Errorf("read the table of contents of block %s: %w", b.key(), d.err)
		case err != nil:
			c.markCorrupt(b.key(), err)
		default:
			c.indexBytes[b.key()] = n
		}
	}
	return nil
}

// objectData is a block's data object, of size bytes, read by one ranged
// GET a read (store.BlockData). err keeps the bucket's first failure, which
// says nothing of the block.
type objectData struct {
	r    bucketlayout.RangeReader
	size int64
	err  error
}

func (o *objectData) Size() int64  { return o.size }
func (o *objectData) Close() error { return nil }

func (o *objectData) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.r.ReadAt(p, off)
	if err != nil && !errors.Is(err, bucketlayout.ErrShortObject) {
		o.err = cmp.Or(o.err, err) // a short object is the block's fault
	}
	return n, err
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// merge downloads the parents into the work directory, merges them, and
// uploads the merged block: data first, meta.json last.
func (c *Compactor) merge(ctx context.Context, parents []*blockObj) (*blockObj, error) {
	work := filepath.Join(c.opts.WorkDir, "merge")
	if err := os.RemoveAll(work); err != nil {
		return nil, fmt.Errorf("clear work directory: %w", err)
	}
	defer os.RemoveAll(work)
	in := filepath.Join(work, "blocks")
	out := filepath.Join(work, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	ids := make([]string, len(parents))
	for i, p := range parents {
		ids[i] = p.id
		if err := c.download(ctx, p, filepath.Join(in, p.id)); err != nil {
			return nil, err
		}
	}
	node := parents[0].node
	meta, err := store.MergeBlocks(ctx, store.DirSource(work), ids, out)
	if err != nil {
		return nil, fmt.Errorf("merge blocks of node %s: %w", node, err)
	}
	meta.Node = node
	dir := filepath.Join(out, meta.ID)
	f, err := os.Open(filepath.Join(dir, bucketlayout.DataFile))
	if err != nil {
		return nil, fmt.Errorf("merged block: %w", err)
	}
	defer f.Close()
	if err := c.checkLock(); err != nil {
		return nil, err
	}
	c.stats.puts.Add(1)
	if err := c.bkt.Upload(ctx, bucketlayout.Block{Node: node, ID: meta.ID}.Object(bucketlayout.DataFile), f); err != nil {
		return nil, fmt.Errorf("upload merged block %s/%s: %w", node, meta.ID, err)
	}
	c.stats.uploadBytes.Add(uint64(meta.Bytes))
	raw, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("merged block meta: %w", err)
	}
	if err := c.checkLock(); err != nil {
		return nil, err
	}
	c.stats.puts.Add(1)
	if err := c.bkt.Upload(ctx, bucketlayout.Block{Node: node, ID: meta.ID}.Object(bucketlayout.MetaFile), bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("upload merged block %s/%s: %w", node, meta.ID, err)
	}
	c.stats.merges.Add(1)
	c.stats.mergedParents.Add(uint64(len(parents)))
	c.log.Info("merged blocks", "bucket", c.name, "node", node, "into", meta.ID, "parents", strings.Join(ids, ","), "samples", meta.Samples, "bytes", meta.Bytes)
	b := &blockObj{node: node, id: meta.ID, hasData: true, hasMeta: true, meta: &meta, newest: c.opts.Now()}
	c.metas[b.key()] = meta
	return b, nil
}

// download copies a parent's data and meta into dir. A data object whose
// length differs from its meta's is corrupt.
func (c *Compactor) download(ctx context.Context, b *blockObj, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	raw, _ := json.Marshal(b.meta)
	if err := os.WriteFile(filepath.Join(dir, bucketlayout.MetaFile), raw, 0o644); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	c.stats.gets.Add(1)
	rc, err := c.bkt.Get(ctx, b.object(bucketlayout.DataFile))
	if err != nil {
		return fmt.Errorf("download block %s: %w", b.key(), err)
	}
	defer rc.Close()
	f, err := os.Create(filepath.Join(dir, bucketlayout.DataFile))
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	n, err := io.Copy(f, rc)
	c.stats.dlBytes.Add(uint64(n))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download block %s: %w", b.key(), err)
	}
	if b.meta.Bytes > 0 && n != b.meta.Bytes {
		return &store.BlockError{Key: b.id, Err: fmt.Errorf("data is %d bytes, meta.json says %d", n, b.meta.Bytes)}
	}
	return nil
}
