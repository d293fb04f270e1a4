package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/workclock"
	"github.com/heatscope/heatscope/lru"
)

// Options configures a DB.
type Options struct {
	// Source names the recording this process writes (default: Node):
	// the source of its blocks' samples (Meta.Source, Sources, a filter's
	// Filter.Sources). Not to be confused with BlockSources, the places
	// blocks are read from.
	Source string
	// Node names this machine in the blocks it writes and for the blocks
	// of its directory that name none (default: the hostname).
	Node string
	// NodeLabels describe this machine (zone, cluster, instance type) in
	// the blocks it writes.
	NodeLabels map[string]string
	// PeriodNs is the recording's sampling period (sample.PeriodOf its frequency),
	// kept in each block's meta so exports know what a sample weighs.
	PeriodNs int64
	// BlockDuration is how much time the head covers before it is cut
	// into a block (default 2 minutes).
	BlockDuration time.Duration
	// MaxHeadSamples cuts the head early when it holds this many samples
	// (default 2 million), bounding the recorder's memory.
	MaxHeadSamples int
	// Retention drops blocks whose newest sample is older than this
	// (imports: older than their import time); 0 keeps everything.
	Retention time.Duration
	// RetentionSize drops the oldest blocks while all blocks together are
	// larger than this many bytes; 0 means no limit.
	RetentionSize int64
	// ReadOnly opens the directory for queries only: no lock, no WAL, no
	// compaction. Recorded data still in a WAL is replayed into memory.
	ReadOnly bool
	// Logger receives warnings (skipped corrupt files, disk full).
	Logger *slog.Logger
	// ChunkCacheSamples bounds the cache of decoded chunks queries share
	// (default 2 M samples, about 40 MB).
	ChunkCacheSamples int
	// IndexCacheBytes bounds the cache of block indexes (tables and
	// summaries) queries share, in bytes (default 32 MiB). Blocks keep no
	// index of their own: the memory of a DB does not grow with the data
	// it retains.
	IndexCacheBytes int64
	// StepCellsBytes bounds the per-CPU steps the Reader keeps for its
	// timelines of every thread (Timeline cuts them by the CPUs' time), in
	// bytes (default 16 MiB), until KeepStepsIn gives it a cache of its
	// caller's (a query service's overview.Cells: one budget for these
	// and the fleet overview's).
	StepCellsBytes int64
	// MaxEvents bounds the system events kept (default 200 000); past it
	// the oldest go first.
	MaxEvents int
	// BlockSources are more places to read sealed blocks from, beside
	// the data directory (a bucket: package bucketstore). Their blocks
	// are opened when a query first needs them and followed by Refresh.
	// Only a read-only DB takes them; its directory may then be "" (none).
	BlockSources []BlockSource
	// OpenUnavailable opens the DB even when a block source does not
	// answer (ErrUnavailable): its blocks are listed by the first Refresh
	// that reaches it, and Health says why meanwhile. A query service
	// started during its bucket's outage then serves once it is back.
	OpenUnavailable bool
	// CallerTicks leaves the periodic work (syncing the WAL every 500 ms,
	// cutting the head, compaction and retention every minute) to the
	// caller, who then calls Tick at least every 250 ms or so, instead of
	// a goroutine with its own timer. The recorder calls it from its poll
	// loop: a timer of the store's own woke the agent twice a second more.
	CallerTicks bool
	// Unshipped reports a block that is not yet copied elsewhere (the
	// shipper's bucket): compaction and the age limit leave it, and only
	// the size limit or a full disk deletes it, as lost (counted in
	// Stats.UnshippedDropped, logged as an error).
	Unshipped func(*Meta) bool
	// OnBlock is called, without locks held, after a head is written as
	// a block (the shipper uploads it).
	OnBlock func(Meta)
}

// Reader reads sealed blocks: those of its block sources (a data
// directory's, a bucket's) and, in a DB, the heads not yet in a block. It
// is the reading half of the store, as a TSDB's block queriers are apart
// from its head: Select, Timeline, NodeCPUSteps, the recordings, nodes and
// events, Refresh and Close; it writes nothing. OpenReader opens one over
// block sources alone (a fleet query service); every DB holds one
// (DB.Reader). Safe for concurrent use.
type Reader struct {
	// dir is the data directory whose blocks and events it reads, ""
	// for none.
	dir  string
	opts Options
	log  *slog.Logger

	// mu guards the blocks and, in a DB, its heads together, so that a
	// query sees each sample once.
	mu     sync.RWMutex
	events *eventLog
	// heads are the samples not yet in a block that a DB's Reader reads
	// beside its blocks (its own heads, or a replayed WAL's); nil in a
	// Reader of block sources alone.
	heads liveHeads

	// blockSources are where blocks are read from: the data directory's
	// (localBlocks, nil without a directory) and Options.BlockSources.
	localBlocks  BlockSource
	blockSources []BlockSource
	// blockSourceErr holds, per block source, why its last listing
	// failed (nil after a good one), for Health.
	blockSourceErr []atomic.Pointer[error]
	// notices are the nodes two instances recorded at once, guarded by
	// mu (separateInstancesLocked).
	notices []*InstanceNotice
	// eventNotices are the nodes two instances shipped events of at once
	// while their blocks do not say so (separateEventInstances), guarded
	// by mu.
	eventNotices []*InstanceNotice

	blocks []*Block // sorted by MinTime, guarded by mu
	// shadowed are the data directory's blocks that another source holds
	// too (shadowCopiesLocked), kept out of blocks, guarded by mu.
	shadowed []*Block

	// blockSourceEvents are the events of the block sources that hold
	// some (EventSource), by time, as their last Refresh read them.
	blockSourceEvents atomic.Pointer[[]events.Event]
	// refreshMu serialises Refresh; badMeta, guarded by it, holds the keys
	// of blocks whose meta was found unreadable (warned about once).
	refreshMu sync.Mutex
	badMeta   map[string]bool
	// chunks caches decoded chunks, bounded by their samples; indexes
	// the indexes of recently queried blocks, bounded by their
	// approximate memory. A cached chunk shares its block's tables, so an
	// index evicted stays in memory while its chunks are cached.
	chunks     *lru.Cache[chunkKey, *Table]
	indexes    *lru.Cache[*Block, *blockIndex]
	indexReads atomic.Uint64
	// timelineSteps is where its timelines keep blocks' per-CPU steps:
	// ownSteps, each block's steps of the last step a timeline asked
	// within Options.StepCellsBytes, or the cache KeepStepsIn gave.
	timelineSteps atomic.Pointer[stepsCache]
	ownSteps      timelineSteps
	// cpuSummaryReads counts per-CPU summary sections read (ReadCPUSteps).
	cpuSummaryReads atomic.Uint64

	// corrupt counts the corrupt blocks and WAL segments skipped.
	corrupt atomic.Uint64
	closed  atomic.Bool
	// closedBlocks and closedBytes are the blocks the directory held when
	// Close released them, for Stats after Close.
	closedBlocks int
	closedBytes  int64
}

// liveHeads is what a DB's Reader reads beside its blocks: the heads not
// yet in a block. Both are called with the Reader's mu held.
type liveHeads interface {
	liveParts(r Range, f *Filter) []part
	liveSpans(fn func(first, last int64, n int))
}

// headsLocked lists the heads' samples in r that f may keep as parts
// (none in a Reader of block sources alone). rd.mu must be held.
func (rd *Reader) headsLocked(r Range, f *Filter) []part {
	if rd.heads == nil {
		return nil
	}
	return rd.heads.liveParts(r, f)
}

// headSpans calls fn with each non-empty head's first and last sample
// times and its sample count. rd.mu must be held.
func (rd *Reader) headSpans(fn func(first, last int64, n int)) {
	if rd.heads != nil {
		rd.heads.liveSpans(fn)
	}
}

// DB is a data directory: its Reader (the sealed blocks, and the heads)
// and, when it records, the writer (headWriter): an in-memory head backed
// by a WAL, cut into blocks, compacted and retained. The Reader's mu
// guards the blocks and the heads together, so that a query sees each
// sample once. A read-only DB reads a directory another process records
// into (its WAL replayed into memory), beside more block sources if given.
type DB struct {
	Reader
	// identity is the data directory's (identity.go).
	identity Identity

	headWriter
}

// headWriter is the writing half of a DB (head.go, maintain.go,
// compact.go, retention.go): zero in a read-only DB but for the heads of
// the WAL it replays (sealing).
type headWriter struct {
	lock *os.File
	// walNode is the node the directory's previous run recorded as, which
	// the samples of its WAL keep.
	walNode string

	head    *Builder // nil when read-only with no WAL data; guarded by mu
	wal     *walWriter
	sealing []*sealingHead // guarded by mu

	writeMu sync.Mutex // serialises block writes, compaction and retention
	// maxMergedIndexBytes is MaxMergedIndexBytes, lowered by tests.
	maxMergedIndexBytes int64

	stop chan struct{}
	done chan struct{}

	lastTick, lastSync, lastMaintain time.Time
	maintaining                      sync.WaitGroup // Maintain runs started by Tick
	maintainBusy                     atomic.Bool

	appended, lost, walDropped, cuts, compactions, dropped, unshippedDropped atomic.Uint64
	// mergePeakOpen is the most parents a compaction held open at once.
	mergePeakOpen atomic.Int64
	diskFull      atomic.Bool
	// walErr holds the last WAL write's error (nil after a good write),
	// for Health.
	walErr atomic.Pointer[error]
	// upkeep times the periodic work; upkeepSpread the same with each
	// block write and merge spread over its samples' time (Upkeep).
	upkeep       workclock.Clock
	upkeepSpread workclock.Spread
}

// sealingHead is a head that has been cut and is being written as a block;
// queries still see it.
type sealingHead struct {
	table    *Table
	walSeq   uint64
	periodNs int64
	// node is the node its samples were recorded as, when not this run's
	// (a WAL replayed after a rename).
	node string
}

const (
	defaultBlockDuration  = 2 * time.Minute
	defaultMaxHeadSamples = 2_000_000
	blocksDir             = "blocks"
)

// Open opens (creating it if needed) the data directory dir. Corrupt blocks
// and WAL segments are skipped with a warning that names them; everything
// else is still served. A read-only DB may read more block sources beside
// its directory (Options.BlockSources); block sources alone are read by a
// Reader (OpenReader).
func Open(dir string, opts Options) (*DB, error) {
	nodeGiven, sourceGiven := opts.Node != "", opts.Source != ""
	opts.setDefaults()
	if len(opts.BlockSources) > 0 && !opts.ReadOnly {
		return nil, errors.New("open: block sources other than the data directory need a read-only DB")
	}
	if dir == "" {
		return nil, errors.New("open: no data directory (block sources alone are read by store.OpenReader)")
	}
	db := &DB{}
	db.init(dir, opts)
	db.heads = db
	db.maxMergedIndexBytes = MaxMergedIndexBytes
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Join(dir, blocksDir), 0o755); err != nil {
			return nil, fmt.Errorf("open data directory: %w", err)
		}
		lock, err := lockDir(dir)
		if err != nil {
			return nil, err
		}
		db.lock = lock
		if db.walNode, err = db.takeIdentity(); err != nil {
			db.Close()
			return nil, err
		}
	} else {
		if fi, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("open data directory: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("open data directory: %s is a file, not a data directory", dir)
		}
		id, ok, err := readIdentity(dir)
		if _, blocksErr := os.Stat(filepath.Join(dir, blocksDir)); err == nil && !ok && errors.Is(blocksErr, fs.ErrNotExist) {
			// Nothing was ever recorded or imported here: say so, or a
			// mistyped --data serves empty answers unexplained.
			db.log.Warn("the data directory holds no recording (no identity.json, no blocks/): is it the directory heatscope record or import wrote?", "dir", dir)
		}
		if err != nil {
			db.log.Warn("reading the data directory's identity", "err", err)
		} else if ok {
			db.identity = id
			// The samples in the WAL are the node's the directory was
			// last recorded as, not this machine's name: a reader beside
			// a recorder given --node shows them under that node.
			if id.Node != "" && !nodeGiven {
				db.opts.Node = id.Node
				if !sourceGiven {
					db.opts.Source = id.Node
				}
			}
		}
	}
	if err := db.load(db.loadWAL); err != nil {
		db.Close()
		return nil, err
	}
	db.lastTick, db.lastSync, db.lastMaintain = time.Now(), time.Now(), time.Now()
	if !opts.ReadOnly && !opts.CallerTicks {
		db.stop, db.done = make(chan struct{}), make(chan struct{})
		go db.background()
	}
	return db, nil
}

// ReaderOptions configures a Reader of block sources (OpenReader); the
// fields are those of Options.
type ReaderOptions struct {
	Logger            *slog.Logger
	ChunkCacheSamples int
	IndexCacheBytes   int64
	StepCellsBytes    int64
	OpenUnavailable   bool
}

// OpenReader opens a Reader of the blocks (and events) of sources, with no
// data directory, head or WAL: a fleet query service over a bucket. A
// source that cannot be listed fails it, unless it is unavailable and
// opts.OpenUnavailable says to go on (Health says why meanwhile, and
// Refresh lists it once it answers).
func OpenReader(sources []BlockSource, opts ReaderOptions) (*Reader, error) {
	if len(sources) == 0 {
		return nil, errors.New("open reader: no block source")
	}
	o := Options{ReadOnly: true, BlockSources: sources, Logger: opts.Logger, ChunkCacheSamples: opts.ChunkCacheSamples,
		IndexCacheBytes: opts.IndexCacheBytes, StepCellsBytes: opts.StepCellsBytes, OpenUnavailable: opts.OpenUnavailable}
	o.setDefaults()
	rd := &Reader{}
	rd.init("", o)
	if err := rd.load(nil); err != nil {
		rd.Close()
		return nil, err
	}
	return rd, nil
}

// setDefaults fills in the options left zero.
func (opts *Options) setDefaults() {
	if opts.BlockDuration <= 0 {
		opts.BlockDuration = defaultBlockDuration
	}
	if opts.MaxHeadSamples <= 0 {
		opts.MaxHeadSamples = defaultMaxHeadSamples
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Node == "" {
		opts.Node, _, _ = SystemNodeNameSource.DefaultNodeName()
	}
	if opts.Source == "" {
		// A node's recording is the source named after it: two nodes
		// cloned from one image share a hostname, never a node name.
		opts.Source = opts.Node
	}
	if opts.ChunkCacheSamples <= 0 {
		opts.ChunkCacheSamples = defaultChunkCacheSamples
	}
	if opts.IndexCacheBytes <= 0 {
		opts.IndexCacheBytes = defaultIndexCacheBytes
	}
	if opts.StepCellsBytes <= 0 {
		opts.StepCellsBytes = defaultStepCellsBytes
	}
}

// init makes rd a Reader of dir's blocks ("" for none) and of
// opts.BlockSources, nothing listed yet, its caches empty.
func (rd *Reader) init(dir string, opts Options) {
	rd.dir, rd.opts, rd.log, rd.badMeta = dir, opts, opts.Logger, map[string]bool{}
	if dir != "" {
		rd.localBlocks = DirSource(dir)
		rd.blockSources = append(rd.blockSources, rd.localBlocks)
	}
	rd.blockSources = append(rd.blockSources, opts.BlockSources...)
	rd.blockSourceErr = make([]atomic.Pointer[error], len(rd.blockSources))
	rd.chunks = lru.New[chunkKey](int64(opts.ChunkCacheSamples), func(t *Table) int64 { return int64(t.Len()) }, nil)
	rd.indexes = lru.New[*Block](opts.IndexCacheBytes, func(ix *blockIndex) int64 { return ix.bytes }, nil)
	rd.ownSteps = timelineSteps{lru.New[*Block](opts.StepCellsBytes, (*CPUSteps).Bytes, nil)}
	rd.timelineSteps.Store(&stepsCache{rd.ownSteps})
}

// load lists the blocks, runs heads (a DB's: its WAL's replay; nil for
// none), opens the directory's event log (none without a directory) and
// reads the block sources' events.
func (rd *Reader) load(heads func() error) error {
	if err := rd.loadBlocks(); err != nil {
		return err
	}
	if heads != nil {
		if err := heads(); err != nil {
			return err
		}
	}
	var err error
	if rd.events, err = openEventLog(rd.dir, rd.opts.ReadOnly, rd.opts.MaxEvents, rd.log); err != nil {
		return err
	}
	if err := rd.refreshBlockSourceEvents(); err != nil {
		rd.log.Warn("reading events", "err", err)
	}
	return nil
}

// Close releases the blocks and the event log. Closing twice is harmless.
func (rd *Reader) Close() error {
	if rd.closed.Swap(true) {
		return nil
	}
	rd.release()
	return nil
}

// release closes the event log and the blocks.
func (rd *Reader) release() {
	if rd.events != nil {
		rd.events.close()
	}
	rd.mu.Lock()
	for _, b := range rd.blocks {
		rd.closedBlocks++
		rd.closedBytes += b.Meta.Bytes
		b.Close()
	}
	rd.blocks = nil
	for _, b := range rd.shadowed {
		b.Close()
	}
	rd.shadowed = nil
	rd.mu.Unlock()
}

// Close stops background work, writes the head as a block, and releases
// the directory. A clean close loses nothing. Closing twice is harmless.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	if db.stop != nil {
		close(db.stop)
		<-db.done
		db.stop = nil
	}
	db.maintaining.Wait()
	if !db.opts.ReadOnly && db.head != nil {
		db.mu.Lock()
		db.cutLocked()
		db.wal.close()
		os.Remove(walPath(db.dir, db.wal.seq))
		db.head = nil
		db.mu.Unlock()
		// Wait for the sealing writes.
		for {
			db.mu.RLock()
			n := len(db.sealing)
			db.mu.RUnlock()
			if n == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	db.release()
	if db.lock != nil {
		db.lock.Close()
	}
	return nil
}
