// Package bucketstore reads the blocks nodes upload to an object storage
// bucket (package bucket, store/FORMAT.md's bucket layout) as a
// store.BlockSource, so that a query service answers over a whole fleet
// with the same store and queries as over one data directory.
//
// The bucket holds, under its prefix, <node>/blocks/<id>/data and
// <node>/blocks/<id>/meta.json, the meta uploaded last: a block without
// its meta is still being uploaded and is left for a later listing.
// Discovery reads the bucket index the compactor writes (package
// bucketindex: one GET for every block's meta and every event segment)
// when its listing is at most Options.IndexMaxAge old, and otherwise lists
// the bucket: one LIST of the nodes and two per node (blocks, events), a
// meta read once per block. A block's data is read with ranged GETs of
// what a query needs: when the block is first queried, the whole object
// if it is at most WholeBytes (a recorder's 2-minute block), else its
// tail (trailer, table of contents, chunk index and the index sections
// after the chunks) in one GET of up to TailBytes, kept in a bounded
// cache, then the chunks before the tail that the query reads. The store
// keeps decoded indexes and chunks in its own bounded caches above this;
// all of them are one LRU (package lru). An optional DiskCache keeps
// what was read on local disk as well.
//
// Errors: an object that is not there is fs.ErrNotExist (a block being
// uploaded, or deleted under a query); any other failure of the bucket is
// store.ErrUnavailable, so that a query fails (HTTP 503 naming the
// bucket) instead of skipping data it could not read. Damaged objects
// are the store's to find (CRCs, bounds): it skips them with a warning.
// Outage says since when the bucket has not answered and when it was
// last listed, so that answers from what was read before can say how
// stale they may be; Events answers from the segments read before while
// the bucket fails.
package bucketstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/lru"
	"github.com/heatscope/heatscope/store"
)

// Options tune a Source.
type Options struct {
	// Timeout bounds each request to the bucket, its retries included
	// (default 10 s): a bucket that does not answer fails the query that
	// waits on it within about this, never hangs it.
	Timeout time.Duration
	// TailBytes is how much of a block's data the first read of its tail
	// fetches (default 256 KiB): enough, for most blocks, to hold the
	// trailer, the table of contents and every index section in one GET.
	TailBytes int64
	// WholeBytes is the size up to which a block's data is fetched whole
	// by its first read (default 1 MiB: a recorder's 2-minute block of 8
	// busy CPUs is about 450 KB): one GET then answers a cold query of
	// the block, where its tail and then each chunk before the tail took
	// one each, one after another. Negative: tails only.
	WholeBytes int64
	// DiskCache, when not nil, keeps the ranges read and the metas on
	// local disk (OpenDiskCache): blocks never change, so what a query
	// service read once it reads again without a GET, after a restart too.
	DiskCache *DiskCache
	// IndexMaxAge is the age up to which the bucket index is trusted
	// (default 15 s): List and Events read it, one GET, instead of listing
	// every node's prefix, when the compactor's listing behind it is at
	// most this old; when it is older, missing or unreadable they list.
	// A block then reaches a reader refreshing every R at most
	// IndexMaxAge + R after its upload. Negative: never read the index.
	IndexMaxAge time.Duration
	// Logger logs the switches between the index and listing (default
	// slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TailCacheBytes bounds the memory the fetched tails and whole blocks
	// take (default 16 MiB); the least recently used go first. A tail is
	// read for a block's header and index, which the store then keeps
	// decoded in its own bounded cache, so that a small cache here costs
	// few GETs.
	TailCacheBytes int64
}

const (
	defaultIndexMaxAge = 15 * time.Second
	// indexReuse is how long an index read is used again without another
	// GET: a refresh reads it for the blocks, then for the events.
	indexReuse            = 2 * time.Second
	defaultTimeout        = 10 * time.Second
	defaultTailBytes      = 256 << 10
	defaultWholeBytes     = 1 << 20
	defaultTailCacheBytes = 16 << 20
	// maxMetaBytes bounds a meta.json read.
	maxMetaBytes = 1 << 20
)

// Source is a bucket's blocks as a store.BlockSource. It is safe for
// concurrent use.
type Source struct {
	bkt  objstore.BucketReader
	name string
	opts Options

	// tails caches the fetched tails (or whole objects), bounded by their
	// bytes; the least recently used go first.
	tails *lru.Cache[string, []byte]
	disk  *DiskCache
	// segments caches the events of event segments read, by object name:
	// a node's segments other than its newest are complete and never read
	// again; with the index, a segment is read again when its time changed.
	segMu    sync.Mutex
	segments map[string]segment
	// badSegments holds the object names under a node's events/ that are
	// not event segments, each logged once.
	badSegments sync.Map

	// ixMu guards the last index read (ix, nil while listing), when it
	// was read, and the metas of its blocks not yet asked for (Meta).
	ixMu       sync.Mutex
	ix         *bucketindex.Index
	ixReadAt   time.Time
	ixMetas    map[string]store.Meta
	usingIndex *bool // nil before the first List

	// healthMu guards since when the bucket has not answered (zero while
	// it answers), its last error, when it was last listed whole, and
	// whether its events were ever read.
	healthMu     sync.Mutex
	failingSince time.Time
	lastErr      error
	listedAt     time.Time
	eventsRead   bool

	stats struct {
		lists, gets, getBytes, tailHits, errors, indexReads, listings atomic.Uint64
	}
}

// segment is a read event segment: its events, and its time in the index
// it was read by (0 when listed).
type segment struct {
	events   []events.Event
	modified int64
}

// Stats counts a Source's requests.
type Stats struct {
	Lists    uint64 // LIST requests
	Gets     uint64 // GET requests (whole objects and ranges)
	GetBytes uint64 // bytes those GETs read
	TailHits uint64 // reads answered from a cached block tail
	Errors   uint64 // failed requests
	// IndexReads counts the bucket index GETs; Listings the refreshes
	// that listed the bucket instead (no index, or a stale one).
	IndexReads uint64
	Listings   uint64
	// TailCacheBytes is the memory the cached tails and blocks take.
	TailCacheBytes int64
	// DiskHits counts the reads the disk cache answered, DiskCacheBytes
	// what it holds (both 0 without one).
	DiskHits       uint64
	DiskCacheBytes int64
	// Unanswered is how long the bucket has not answered (0 while it
	// does); Listed when its blocks were last listed whole (zero: never).
	Unanswered time.Duration
	Listed     time.Time
}

// New returns the blocks of bkt as a BlockSource. name names the bucket in
// messages (provider, bucket and prefix: never credentials).
func New(bkt objstore.BucketReader, name string, opts Options) *Source {
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.TailBytes <= 0 {
		opts.TailBytes = defaultTailBytes
	}
	if opts.WholeBytes == 0 {
		opts.WholeBytes = defaultWholeBytes
	}
	if opts.TailCacheBytes <= 0 {
		opts.TailCacheBytes = defaultTailCacheBytes
	}
	if opts.IndexMaxAge == 0 {
		opts.IndexMaxAge = defaultIndexMaxAge
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Source{bkt: bkt, name: name, opts: opts, segments: map[string]segment{}, disk: opts.DiskCache,
		tails: lru.New[string](opts.TailCacheBytes, func(b []byte) int64 { return int64(len(b)) }, nil)}
}

// String names the source.
func (s *Source) String() string { return "bucket " + s.name }

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	st := Stats{Lists: s.stats.lists.Load(), Gets: s.stats.gets.Load(), GetBytes: s.stats.getBytes.Load(),
		TailHits: s.stats.tailHits.Load(), Errors: s.stats.errors.Load(), TailCacheBytes: s.tails.Weight(),
		IndexReads: s.stats.indexReads.Load(), Listings: s.stats.listings.Load(),
		DiskHits: s.disk.hitCount(), DiskCacheBytes: s.disk.size()}
	s.healthMu.Lock()
	if !s.failingSince.IsZero() {
		st.Unanswered = s.opts.Now().Sub(s.failingSince)
	}
	st.Listed = s.listedAt
	s.healthMu.Unlock()
	return st
}

// index returns the bucket index when it may be trusted, nil when the
// bucket must be listed. An index read within indexReuse is used again.
func (s *Source) index(ctx context.Context) *bucketindex.Index {
	if s.opts.IndexMaxAge < 0 {
		return nil
	}
	now := s.opts.Now()
	s.ixMu.Lock()
	if s.ix != nil && now.Sub(s.ixReadAt) < indexReuse {
		defer s.ixMu.Unlock()
		return s.ix
	}
	s.ixMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.stats.gets.Add(1)
	s.stats.indexReads.Add(1)
	ix, err := bucketindex.Read(ctx, s.bkt)
	why := ""
	switch {
	case errors.Is(err, bucketindex.ErrNotFound):
		why = "the bucket has no index (heatscope compact writes it)"
	case err != nil:
		s.stats.errors.Add(1)
		why = err.Error()
	case ix.Stale(now, s.opts.IndexMaxAge):
		listed := ix.ListedAt
		if listed == 0 {
			listed = ix.UpdatedAt
		}
		why = fmt.Sprintf("the bucket index was listed %s ago, more than %s", now.Sub(time.UnixMilli(listed)).Round(time.Second), s.opts.IndexMaxAge)
	}
	s.ixMu.Lock()
	defer s.ixMu.Unlock()
	using := why == ""
	if s.usingIndex == nil || *s.usingIndex != using {
		if using {
			s.opts.Logger.Info("reading the bucket index instead of listing", "bucket", s.name, "blocks", len(ix.Blocks))
		} else {
			s.opts.Logger.Info("listing the bucket", "bucket", s.name, "why", why)
		}
		s.usingIndex = &using
	}
	if !using {
		s.ix = nil
		return nil
	}
	s.ix, s.ixReadAt = &ix, now
	return s.ix
}

// List returns "<node>/<block id>" for every block of every node: from
// the bucket index when it is fresh, else by listing.
func (s *Source) List(ctx context.Context) ([]string, error) {
	if ix := s.index(ctx); ix != nil {
		keys := make([]string, 0, len(ix.Blocks)+len(ix.Corrupt))
		metas := make(map[string]store.Meta, len(ix.Blocks)+len(ix.Corrupt))
		for _, m := range ix.Blocks {
			if bucketlayout.ValidName(m.Node) && bucketlayout.ValidName(m.ID) {
				key := bucketlayout.Block{Node: m.Node, ID: m.ID}.Key()
				keys = append(keys, key)
				metas[key] = m
			}
		}
		// The blocks the compactor found corrupt are listed as a listing
		// lists them, so that the store names them as it does then: one
		// whose meta is damaged when it reads that meta, one whose data is
		// when a query reads it.
		for _, c := range ix.Corrupt {
			if bucketlayout.ValidName(c.Node) && bucketlayout.ValidName(c.ID) {
				key := bucketlayout.Block{Node: c.Node, ID: c.ID}.Key()
				keys = append(keys, key)
				if c.Meta != nil {
					metas[key] = *c.Meta
				}
			}
		}
		s.ixMu.Lock()
		s.ixMetas = metas
		s.ixMu.Unlock()
		s.listed()
		return keys, nil
	}
	s.stats.listings.Add(1)
	s.ixMu.Lock()
	s.ixMetas = nil
	s.ixMu.Unlock()
	l, err := s.list(ctx, bucketlayout.ListOptions{Blocks: true})
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(l.Blocks))
	for i, b := range l.Blocks {
		keys[i] = b.Key()
	}
	s.listed()
	return keys, nil
}

// Events returns the events every node shipped (<node>/events/<segment>),
// each labelled with its node and the instance that recorded them
// (<node>/events/<instance>-<segment>; objects named before instances
// named them are read too, with no instance label). An instance's
// segments other than its newest are read once; its newest, which its
// recorder uploads again as it grows, at every call, or, with the bucket
// index, when its time in the index changed. A damaged segment gives the
// events before the damage.
func (s *Source) Events(ctx context.Context) ([]events.Event, error) {
	evs, err := s.events(ctx)
	if err != nil {
		return s.cachedEvents(), err
	}
	s.healthMu.Lock()
	s.eventsRead = true
	s.healthMu.Unlock()
	s.answered()
	return evs, nil
}

// cachedEvents returns the events of every segment read before, by
// segment: what Events answers while the bucket fails, rather than none.
func (s *Source) cachedEvents() []events.Event {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	names := slices.Sorted(maps.Keys(s.segments))
	var out []events.Event
	for _, name := range names {
		out = append(out, s.segments[name].events...)
	}
	return out
}

func (s *Source) events(ctx context.Context) ([]events.Event, error) {
	var segs []seg
	if ix := s.index(ctx); ix != nil {
		for _, sg := range ix.Segments {
			if bucketlayout.ValidName(sg.Node) {
				segs = append(segs, seg{node: sg.Node, name: sg.Name, modified: sg.Modified})
			}
		}
	} else {
		l, err := s.list(ctx, bucketlayout.ListOptions{Segments: true})
		if err != nil {
			return nil, err
		}
		for _, sg := range l.Segments {
			segs = append(segs, seg{node: sg.Node, name: sg.Name})
		}
	}
	segs = s.markNewest(segs)
	var out []events.Event
	seen := map[string]bool{}
	for _, sg := range segs {
		seen[sg.name] = true
		s.segMu.Lock()
		cached, ok := s.segments[sg.name]
		s.segMu.Unlock()
		stale := !ok || (sg.modified == 0 && sg.newest) || (sg.modified != 0 && cached.modified != sg.modified)
		if stale {
			evs, whole, err := s.readSegment(ctx, sg.node, sg.instance, sg.name)
			if err != nil {
				return nil, err
			}
			cached = segment{evs, sg.modified}
			if whole {
				s.segMu.Lock()
				s.segments[sg.name] = cached
				s.segMu.Unlock()
			}
		}
		out = append(out, cached.events...)
	}
	s.segMu.Lock()
	for name := range s.segments {
		if !seen[name] {
			delete(s.segments, name) // deleted by the bucket's retention
		}
	}
	s.segMu.Unlock()
	return out, nil
}

// seg is an event segment object as listed.
type seg struct {
	node, name string
	// instance is the recorder's instance id its name holds ("" for an
	// object named before instances named them).
	instance string
	seq      uint64
	modified int64
	// newest is true for the last segment of its node's instance, the one
	// its recorder may still be uploading again as it grows.
	newest bool
}

// markNewest keeps the event segment objects (bucketlayout.ParseEventSegment,
// logging any other name under events/ once) and marks each instance's
// newest: a node's data directories number their segments each from 1,
// so no order of names across instances says which one grows.
func (s *Source) markNewest(segs []seg) []seg {
	kept := segs[:0]
	for _, sg := range segs {
		o, err := bucketlayout.ParseEventSegment(sg.name)
		if err != nil || o.Node != sg.node {
			if _, warned := s.badSegments.LoadOrStore(sg.name, true); !warned {
				s.opts.Logger.Warn("bucket: an object under a node's events/ is not an event segment; not read", "object", sg.name, "err", err)
			}
			continue
		}
		sg.instance, sg.seq = o.Instance, o.Seq
		kept = append(kept, sg)
	}
	slices.SortFunc(kept, func(a, b seg) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.instance, b.instance), cmp.Compare(a.seq, b.seq))
	})
	for i := range kept {
		next := i + 1
		kept[i].newest = next == len(kept) || kept[next].node != kept[i].node || kept[next].instance != kept[i].instance
	}
	return kept
}

// readSegment reads one event segment object and labels its events with
// node and, when its name holds one, the instance that recorded them;
// whole is false when it stopped at a torn or damaged page (or a failed
// read), so that it is read again next time.
func (s *Source) readSegment(ctx context.Context, node, instance, name string) (evs []events.Event, whole bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.stats.gets.Add(1)
	rc, err := s.bkt.Get(ctx, name)
	if s.bkt.IsObjNotFoundErr(err) {
		return nil, false, nil // deleted since the listing
	}
	if err != nil {
		return nil, false, s.fail(err)
	}
	defer rc.Close()
	cr := &countingReader{r: rc}
	evs, err = store.ReadEventSegment(cr, name)
	s.stats.getBytes.Add(uint64(cr.n))
	if err != nil && ctx.Err() != nil {
		return nil, false, s.fail(err)
	}
	// A segment cut short or damaged keeps the events before it.
	for i := range evs {
		labels := make(map[string]string, len(evs[i].Labels)+1)
		for k, v := range evs[i].Labels {
			labels[k] = v
		}
		labels["node"] = node
		if instance != "" {
			labels[store.InstanceLabel] = instance
		}
		evs[i].Labels = labels
	}
	return evs, err == nil, nil
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// list lists the bucket (one LIST of the nodes, then one of each node's
// blocks/ or events/), each request bounded by Options.Timeout.
func (s *Source) list(ctx context.Context, opts bucketlayout.ListOptions) (bucketlayout.Listing, error) {
	opts.Timeout = s.opts.Timeout
	opts.OnList = func() { s.stats.lists.Add(1) }
	l, err := bucketlayout.List(ctx, s.bkt, opts)
	if err != nil {
		return l, s.fail(err)
	}
	s.answered()
	return l, nil
}

// Meta reads a block's meta.json. Its node is the one in the block's
// path, whatever the meta says.
func (s *Source) Meta(ctx context.Context, key string) (store.Meta, error) {
	b, err := bucketlayout.ParseBlockKey(key)
	if err != nil {
		return store.Meta{}, err
	}
	name := b.Object(bucketlayout.MetaFile)
	s.ixMu.Lock()
	im, ok := s.ixMetas[key]
	delete(s.ixMetas, key) // asked for once: the store keeps it
	s.ixMu.Unlock()
	if ok {
		im.Node = b.Node
		return im, nil
	}
	raw := s.disk.get(name)
	cached := raw != nil
	if !cached {
		if raw, err = s.readMeta(ctx, name); err != nil {
			return store.Meta{}, err
		}
	}
	m, err := store.ParseMeta(raw)
	if err != nil {
		return store.Meta{}, fmt.Errorf("%s: %w", name, err)
	}
	if !cached {
		s.disk.put(name, raw) // a meta is written once, last: never changes
	}
	m.Node = b.Node
	return m, nil
}

// readMeta reads a meta.json object.
func (s *Source) readMeta(ctx context.Context, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.stats.gets.Add(1)
	rc, err := s.bkt.Get(ctx, name)
	if err != nil {
		return nil, s.fail(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxMetaBytes+1))
	if err != nil {
		return nil, s.fail(err)
	}
	s.stats.getBytes.Add(uint64(len(b)))
	s.answered()
	if len(b) > maxMetaBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxMetaBytes)
	}
	return b, nil
}

// Open returns a block's data object, read in ranges. It asks the bucket
// for the object's size (one HEAD): a truncated upload then shows as a
// damaged block, not as reads past its end. When the meta states the
// size, the HEAD goes alongside the object's first GET instead of before
// it, and that GET's answer waits for the HEAD's: one round trip, not two
// (and none when the disk cache holds what is read).
func (s *Source) Open(ctx context.Context, key string, m store.Meta) (store.BlockData, error) {
	b, err := bucketlayout.ParseBlockKey(key)
	if err != nil {
		return nil, err
	}
	name := b.Object(bucketlayout.DataFile)
	o := &object{s: s, name: name, size: m.Bytes, checked: make(chan struct{})}
	if m.Bytes > 0 {
		return o, nil
	}
	o.check.Do(func() {}) // checked here
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	attrs, err := s.bkt.Attributes(ctx, name)
	if err != nil {
		return nil, s.fail(err)
	}
	o.size = attrs.Size
	close(o.checked)
	return o, nil
}

// checkSize asks the bucket for an object's size and fails unless it is
// size.
func (s *Source) checkSize(ctx context.Context, name string, size int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	attrs, err := s.bkt.Attributes(ctx, name)
	if err != nil {
		return s.fail(err)
	}
	if attrs.Size != size {
		return fmt.Errorf("%s is %d bytes, its meta says %d: truncated or damaged", name, attrs.Size, size)
	}
	return nil
}

// fail classifies a bucket error: not found (an answer), or the bucket
// unavailable (noted for Outage).
func (s *Source) fail(err error) error {
	s.stats.errors.Add(1)
	if s.bkt.IsObjNotFoundErr(err) {
		s.answered()
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	e := &unavailableError{bucket: s.name, err: err}
	s.healthMu.Lock()
	if s.failingSince.IsZero() {
		s.failingSince = s.opts.Now()
		s.opts.Logger.Warn("the bucket does not answer: answers come from what was read before", "bucket", s.name, "err", err)
	}
	s.lastErr = e
	s.healthMu.Unlock()
	return e
}

// answered notes that the bucket answered a request. An outage since
// before the bucket was first read whole (its blocks listed, its events
// read) lasts until it is: until then there is nothing complete to answer.
func (s *Source) answered() {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.listedAt.IsZero() || !s.eventsRead {
		return
	}
	if !s.failingSince.IsZero() {
		s.opts.Logger.Info("the bucket answers again", "bucket", s.name, "after", s.opts.Now().Sub(s.failingSince).Round(time.Second))
	}
	s.failingSince, s.lastErr = time.Time{}, nil
}

// listed notes a complete listing of the bucket's blocks.
func (s *Source) listed() {
	s.healthMu.Lock()
	s.listedAt = s.opts.Now()
	s.healthMu.Unlock()
	s.answered()
}

// Outage is a bucket that does not answer.
type Outage struct {
	// Since is the first failure since the bucket last answered; Err is
	// the last one (store.ErrUnavailable, naming the bucket).
	Since time.Time
	Err   error
	// Listed is when the bucket's blocks were last listed whole: blocks
	// uploaded since are not known. Zero: never, nothing was read.
	Listed time.Time
}

// Outage returns the bucket's outage, nil while it answers.
func (s *Source) Outage() *Outage {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.failingSince.IsZero() {
		return nil
	}
	return &Outage{Since: s.failingSince, Err: s.lastErr, Listed: s.listedAt}
}

// unavailableError is a bucket that failed a request: store.ErrUnavailable.
type unavailableError struct {
	bucket string
	err    error
}

func (e *unavailableError) Error() string {
	msg := e.err.Error()
	if !strings.Contains(msg, e.bucket) {
		msg = "bucket " + e.bucket + ": " + msg
	}
	return "storage unavailable: " + msg
}

func (e *unavailableError) Is(target error) bool { return target == store.ErrUnavailable }
func (e *unavailableError) Unwrap() error        { return e.err }

// object is a block's data in the bucket.
type object struct {
	s    *Source
	name string
	size int64
	// check starts the HEAD that compares the object's size with its
	// meta's; checked is closed once it answered, checkErr says how.
	check    sync.Once
	checked  chan struct{}
	checkErr error
}

func (o *object) Size() int64  { return o.size }
func (o *object) Close() error { o.s.tails.Remove(o.name); return nil }

// ReadAt reads len(p) bytes at off: from the cached tail when they lie in
// it, fetching the tail first when they lie in its span, else with a
// ranged GET of exactly these bytes. The tail of an object of at most
// Options.WholeBytes is the whole object.
func (o *object) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > o.size {
		return 0, fmt.Errorf("read %s at %d+%d: outside its %d bytes", o.name, off, len(p), o.size)
	}
	tailStart := max(0, o.size-o.s.opts.TailBytes)
	if o.size <= o.s.opts.WholeBytes {
		tailStart = 0
	}
	if off >= tailStart {
		tail, err := o.tail(tailStart)
		if err != nil {
			return 0, err
		}
		return copy(p, tail[off-tailStart:]), nil
	}
	b, err := o.get(off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	return copy(p, b), nil
}

// tail returns the object's bytes from start to its end, from the cache or
// fetched into it.
func (o *object) tail(start int64) ([]byte, error) {
	if b, ok := o.s.tails.Get(o.name); ok {
		o.s.stats.tailHits.Add(1)
		return b, nil
	}
	b, err := o.get(start, o.size-start)
	if err != nil {
		return nil, err
	}
	o.s.tails.Add(o.name, b)
	return b, nil
}

// get reads n bytes at off: from the disk cache, or with one ranged GET
// (then kept in the disk cache). It fails, whatever the GET gave, when
// the object's size does not match its meta.
func (o *object) get(off, n int64) ([]byte, error) {
	key := fmt.Sprintf("%s@%d+%d", o.name, off, n)
	if b := o.s.disk.get(key); b != nil {
		return b, nil // fetched whole before, so the object had its size
	}
	o.check.Do(func() {
		go func() {
			defer close(o.checked)
			o.checkErr = o.s.checkSize(context.Background(), o.name, o.size)
		}()
	})
	b, err := o.fetch(off, n)
	<-o.checked
	if o.checkErr != nil {
		return nil, o.checkErr
	}
	if err != nil {
		return nil, err
	}
	o.s.disk.put(key, b)
	return b, nil
}

// fetch reads n bytes at off with one ranged GET.
func (o *object) fetch(off, n int64) ([]byte, error) {
	r := bucketlayout.RangeReader{Bucket: o.s.bkt, Name: o.name, Timeout: o.s.opts.Timeout, OnGet: func(got int) {
		o.s.stats.gets.Add(1)
		o.s.stats.getBytes.Add(uint64(got))
	}}
	b := make([]byte, n)
	_, err := r.ReadAt(b, off)
	if errors.Is(err, bucketlayout.ErrShortObject) {
		return nil, err
	}
	if err != nil {
		return nil, o.s.fail(err)
	}
	o.s.answered()
	return b, nil
}
