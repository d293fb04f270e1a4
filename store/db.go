package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/lru"
	"github.com/heatscope/heatscope/sample"
)

// Options configures a DB.
type Options struct {
	// Source names the data this process records (default: Node).
	Source string
	// Node names this machine in the blocks it writes and for the blocks
	// of its directory that name none (default: the hostname).
	Node string
	// NodeLabels describe this machine (zone, cluster, instance type) in
	// the blocks it writes.
	NodeLabels map[string]string
	// PeriodNs is the recording's sampling period (1e9 / frequency),
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
	// StepCellsBytes bounds the fleet overview's per-CPU cells kept for
	// steps the warming (DB.WarmCPUSteps) does not serve, a zoom's, in
	// bytes (default 16 MiB); see NodeCPUSteps.
	StepCellsBytes int64
	// MaxEvents bounds the system events kept (default 200 000); past it
	// the oldest go first.
	MaxEvents int
	// Sources are more places to read sealed blocks from, beside the data
	// directory (a bucket: package bucketstore). Their blocks are opened
	// when a query first needs them and followed by Refresh. Only a
	// read-only DB takes them; its directory may then be "" (none).
	Sources []BlockSource
	// OpenUnavailable opens the DB even when a source's storage does not
	// answer (ErrUnavailable): its blocks are listed by the first Refresh
	// that reaches it, and Health says why meanwhile. A query service
	// started during its bucket's outage then serves once it is back.
	OpenUnavailable bool
	// CallerTicks leaves the periodic work (syncing the WAL every 500 ms,
	// cutting the head, compaction and retention every minute) to the
	// caller, who then calls Tick at least every 100 ms or so, instead of
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

// Stats counts what the DB did and lost.
type Stats struct {
	Appended      uint64 // samples appended
	Lost          uint64 // samples lost for good (disk full with nothing left to drop)
	WALDropped    uint64 // samples whose WAL page could not be written (kept in memory)
	WALBytes      int64
	BlockBytes    int64
	Blocks        int
	HeadSamples   int
	Sealing       int // heads cut and not yet written as blocks
	Cuts          uint64
	Compactions   uint64
	RetentionDrop uint64 // blocks deleted by retention or to free space
	// UnshippedDropped counts blocks the size limit or a full disk
	// deleted before Options.Unshipped let them go: lost to the bucket.
	UnshippedDropped uint64
	CorruptSkips     uint64 // corrupt blocks or WAL segments skipped
	// IndexesCached and IndexCacheBytes are the block indexes in memory
	// and their approximate size (bounded by Options.IndexCacheBytes).
	IndexesCached   int
	IndexCacheBytes int64
	IndexReads      uint64 // block indexes read from disk (cache misses)
	// CPUSummaryReads counts blocks' per-CPU summary sections read for
	// the fleet overview (its cache misses, and DB.WarmCPUSteps's reads).
	CPUSummaryReads uint64
	// OverviewWarmBlocks counts the blocks whose per-CPU cells are warm
	// at the step DB.WarmCPUSteps last warmed, OverviewWarmPending those
	// of format version 4 or later still cold at it but for those whose
	// summary it found corrupt (0 and 0 before any warming), and
	// OverviewWarmBytes the memory the warm cells hold.
	OverviewWarmBlocks  int
	OverviewWarmPending int
	OverviewWarmBytes   int64
	// OverviewStepCellsBytes is the memory of the overview's cells at
	// other steps (zooms), bounded by Options.StepCellsBytes.
	OverviewStepCellsBytes int64
	Events                 int    // system events kept
	EventsDropped          uint64 // system events deleted by retention
}

// DB is a data directory: sealed blocks plus, for the recording source, an
// in-memory head backed by a WAL.
type DB struct {
	dir  string
	opts Options
	// sources are where blocks are read from: the data directory's
	// (local, nil without a directory) and Options.Sources.
	local   BlockSource
	sources []BlockSource
	// sourceErr holds, per source, why its last listing failed (nil
	// after a good one), for Health.
	sourceErr []atomic.Pointer[error]
	log       *slog.Logger
	lock      *os.File
	// identity is the data directory's (identity.go); walNode the node
	// its previous run recorded as, which the samples of its WAL keep.
	identity Identity
	walNode  string
	// notices are the nodes two instances recorded at once, guarded by
	// mu (separateInstancesLocked).
	notices []*InstanceNotice
	// eventNotices are the nodes two instances shipped events of at once
	// while their blocks do not say so (separateEventInstances), guarded
	// by mu.
	eventNotices []*InstanceNotice

	mu      sync.RWMutex
	blocks  []*Block // sorted by MinTime
	head    *Builder // nil when read-only with no WAL data
	wal     *walWriter
	sealing []*sealingHead
	events  *eventLog

	writeMu sync.Mutex // serialises block writes, compaction and retention
	// sourceEvents are the events of the sources that hold some
	// (EventSource), by time, as their last Refresh read them.
	sourceEvents atomic.Pointer[[]events.Event]
	// refreshMu serialises Refresh; badMeta, guarded by it, holds the keys
	// of blocks whose meta was found unreadable (warned about once).
	refreshMu sync.Mutex
	badMeta   map[string]bool
	// chunks caches decoded chunks, bounded by their samples; indexes
	// the indexes of recently queried blocks, bounded by their
	// approximate memory. A cached chunk shares its block's tables, so an
	// index evicted stays in memory while its chunks are cached.
	chunks  *lru.Cache[chunkKey, *Table]
	indexes *lru.Cache[*Block, *blockIndex]
	// stepCells caches each block's fleet overview cells of the last step
	// asked that its warm cells do not serve, bounded by their memory.
	stepCells *lru.Cache[*Block, *cpuStepCells]
	// maxMergedIndexBytes is MaxMergedIndexBytes, lowered by tests.
	maxMergedIndexBytes int64

	stop chan struct{}
	done chan struct{}

	lastTick, lastSync, lastMaintain time.Time
	maintaining                      sync.WaitGroup // Maintain runs started by Tick
	maintainBusy                     atomic.Bool

	appended, lost, walDropped, cuts, compactions, dropped, corrupt, indexReads, unshippedDropped atomic.Uint64
	// cpuSummaryReads counts per-CPU summary sections read for the fleet
	// overview; warmStep is the step WarmCPUSteps last warmed (0: none)
	// and warmBytes the memory its cells hold.
	cpuSummaryReads     atomic.Uint64
	warmStep, warmBytes atomic.Int64
	// mergePeakOpen is the most parents a compaction held open at once.
	mergePeakOpen    atomic.Int64
	diskFull, closed atomic.Bool
	// walErr holds the last WAL write's error (nil after a good write),
	// for Health.
	walErr atomic.Pointer[error]
	// closedBlocks and closedBytes are the blocks the directory held when
	// Close released them, for Stats after Close.
	closedBlocks int
	closedBytes  int64
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
// else is still served.
func Open(dir string, opts Options) (*DB, error) {
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
	if len(opts.Sources) > 0 && !opts.ReadOnly {
		return nil, errors.New("open: block sources other than the data directory need a read-only DB")
	}
	if dir == "" && (!opts.ReadOnly || len(opts.Sources) == 0) {
		return nil, errors.New("open: no data directory")
	}
	db := &DB{dir: dir, opts: opts, log: opts.Logger, badMeta: map[string]bool{}}
	if dir != "" {
		db.local = DirSource(dir)
		db.sources = append(db.sources, db.local)
	}
	db.sources = append(db.sources, opts.Sources...)
	db.sourceErr = make([]atomic.Pointer[error], len(db.sources))
	db.chunks = lru.New[chunkKey](int64(opts.ChunkCacheSamples), func(t *Table) int64 { return int64(t.Len()) }, nil)
	db.indexes = lru.New[*Block](opts.IndexCacheBytes, func(ix *blockIndex) int64 { return ix.bytes }, nil)
	db.stepCells = lru.New[*Block](opts.StepCellsBytes, (*cpuStepCells).bytes, nil)
	db.maxMergedIndexBytes = MaxMergedIndexBytes
	switch {
	case dir == "":
		// Other sources only: no directory, WAL or events of its own.
	case !opts.ReadOnly:
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
	default:
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("open data directory: %w", err)
		}
		if id, ok, err := readIdentity(dir); err != nil {
			db.log.Warn("reading the data directory's identity", "err", err)
		} else if ok {
			db.identity = id
		}
	}
	if err := db.loadBlocks(); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.loadWAL(); err != nil {
		db.Close()
		return nil, err
	}
	var err error
	if db.events, err = openEventLog(dir, opts.ReadOnly, opts.MaxEvents, db.log); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.refreshSourceEvents(); err != nil {
		db.log.Warn("reading events", "err", err)
	}
	db.lastTick, db.lastSync, db.lastMaintain = time.Now(), time.Now(), time.Now()
	if !opts.ReadOnly && !opts.CallerTicks {
		db.stop, db.done = make(chan struct{}), make(chan struct{})
		go db.background()
	}
	return db, nil
}

// loadBlocks opens every block of the data directory, removing leftovers
// of interrupted writes and compactions, and lists the other sources'
// blocks (opened when first queried). A source that cannot be listed fails
// the open, its error naming it, unless it is unavailable and
// Options.OpenUnavailable says to go on.
func (db *DB) loadBlocks() error {
	var blocks []*Block
	if db.local != nil {
		root := filepath.Join(db.dir, blocksDir)
		entries, err := os.ReadDir(root)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("list blocks: %w", err)
		}
		for _, e := range entries {
			path := filepath.Join(root, e.Name())
			if strings.HasSuffix(e.Name(), ".tmp") {
				if !db.opts.ReadOnly {
					os.RemoveAll(path) // an interrupted write
				}
				continue
			}
			if !e.IsDir() {
				continue
			}
			b, err := db.openLocal(path)
			if err != nil {
				db.corrupt.Add(1)
				db.log.Warn("skipping unreadable block", "block", path, "err", err)
				continue
			}
			blocks = append(blocks, b)
		}
	}
	for i, src := range db.sources {
		if src == db.local {
			continue
		}
		added, err := db.listNew(i, nil)
		if err != nil && db.opts.OpenUnavailable && errors.Is(err, ErrUnavailable) {
			db.log.Warn("a source does not answer: its blocks are listed once it does", "err", err)
			continue
		}
		if err != nil {
			for _, b := range blocks {
				b.Close()
			}
			return err
		}
		blocks = append(blocks, added...)
	}
	// A compaction that crashed after writing its block but before deleting
	// its parents leaves both: the parents go.
	replaced := replacedBy(blocks)
	for _, b := range blocks {
		if replaced[parentKey{b.src, b.recorded(), b.Meta.ID}] {
			b.Close()
			if !db.opts.ReadOnly && b.Dir != "" {
				os.RemoveAll(b.Dir)
			}
			continue
		}
		db.blocks = append(db.blocks, b)
	}
	for _, b := range db.separateInstancesLocked() {
		b.Close()
	}
	db.sortBlocks()
	return nil
}

// openLocal opens a block of the data directory. A block that names no
// node is this directory's node's.
func (db *DB) openLocal(path string) (*Block, error) {
	b, err := openBlock(path)
	if err == nil && b.Meta.Node == "" {
		b.Meta.Node = db.opts.Node
	}
	return b, err
}

// parentKey names a block a compaction may have replaced: compactions
// merge blocks of one node in one source.
type parentKey struct {
	src      BlockSource
	node, id string
}

// replacedBy returns the blocks the given blocks list as their parents.
func replacedBy(blocks []*Block) map[parentKey]bool {
	replaced := map[parentKey]bool{}
	for _, b := range blocks {
		for _, p := range b.Meta.Parents {
			replaced[parentKey{b.src, b.recorded(), p}] = true
		}
	}
	return replaced
}

// listNew lists source i and returns its blocks that known (keys of blocks
// already open) lacks, with the keys it listed. Blocks of the data
// directory are opened at once; others when a query first needs them. A
// block still being written (no meta yet) is left for a later listing; a
// block whose meta cannot be read is skipped with a warning.
func (db *DB) listNew(i int, known map[string]bool) ([]*Block, error) {
	added, _, err := db.listSource(i, known)
	return added, err
}

// sourceError names src in err, unless err names it already (a bucket's
// errors name the bucket).
func sourceError(src BlockSource, err error) error {
	if strings.Contains(err.Error(), src.String()) {
		return err
	}
	return fmt.Errorf("%s: %w", src, err)
}

func (db *DB) listSource(i int, known map[string]bool) (added []*Block, listed map[string]bool, err error) {
	src := db.sources[i]
	ctx := context.Background()
	keys, err := src.List(ctx)
	if err != nil {
		err = sourceError(src, err)
		db.sourceErr[i].Store(&err)
		return nil, nil, err
	}
	db.sourceErr[i].Store(nil)
	listed = make(map[string]bool, len(keys))
	for _, key := range keys {
		listed[key] = true
		if known[key] {
			continue
		}
		if src == db.local {
			b, err := db.openLocal(filepath.Join(db.dir, blocksDir, key))
			if err != nil {
				continue // being written or damaged: next time, or never
			}
			added = append(added, b)
			continue
		}
		m, err := src.Meta(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not completely uploaded yet
		}
		if err != nil {
			if errors.Is(err, ErrUnavailable) {
				err = sourceError(src, err)
				db.sourceErr[i].Store(&err)
				for _, b := range added {
					b.Close()
				}
				return nil, nil, err
			}
			if !db.badMeta[key] {
				db.badMeta[key] = true
				db.corrupt.Add(1)
				db.log.Warn("skipping block with an unreadable meta", "source", src.String(), "block", key, "err", err)
			}
			continue
		}
		added = append(added, newBlock(src, key, m))
	}
	return added, listed, nil
}

func (db *DB) sortBlocks() {
	slices.SortFunc(db.blocks, func(a, b *Block) int {
		return cmp.Or(cmp.Compare(a.Meta.MinTime, b.Meta.MinTime), cmp.Compare(a.Meta.ID, b.Meta.ID))
	})
}

// loadWAL replays the WAL segments not yet in blocks. A writer turns each
// into a block and starts a new segment; a reader keeps them in memory.
func (db *DB) loadWAL() error {
	if db.local == nil {
		return nil
	}
	seqs, err := walSegments(db.dir)
	if err != nil {
		return err
	}
	var sealed uint64
	for _, b := range db.blocks {
		sealed = max(sealed, b.Meta.WALSegment)
	}
	next := sealed + 1
	for _, seq := range seqs {
		next = max(next, seq+1)
		path := walPath(db.dir, seq)
		if seq <= sealed {
			if !db.opts.ReadOnly {
				os.Remove(path) // already in a block
			}
			continue
		}
		b, err := replayWAL(path)
		if err != nil {
			db.corrupt.Add(1)
			db.log.Warn("WAL segment damaged; keeping the samples before the damage", "segment", path, "samples", b.T.Len(), "err", err)
		}
		// Segments written before the period record existed take the
		// period this process was given.
		period := cmp.Or(b.periodNs, db.opts.PeriodNs)
		if db.opts.ReadOnly {
			if b.T.Len() > 0 {
				db.sealing = append(db.sealing, &sealingHead{table: b.table(), walSeq: seq, periodNs: period})
			}
			continue
		}
		if b.T.Len() > 0 {
			if err := db.writeHead(&sealingHead{table: b.table(), walSeq: seq, periodNs: period, node: db.walNode}); err != nil {
				return err
			}
		}
		os.Remove(path)
	}
	if db.opts.ReadOnly {
		return nil
	}
	return db.newHead(next)
}

// newHead starts an empty head logging to WAL segment seq.
func (db *DB) newHead(seq uint64) error {
	w, err := createWAL(db.dir, seq)
	if err != nil {
		return err
	}
	w.raw = db.opts.CallerTicks
	if db.opts.PeriodNs > 0 {
		w.setPeriod(db.opts.PeriodNs)
	}
	db.head = NewBuilder()
	db.head.periodNs = db.opts.PeriodNs
	db.head.onNew = w
	db.wal = w
	return nil
}

// Append adds a sample to the head.
func (db *DB) Append(s *sample.Sample) error {
	if db.opts.ReadOnly {
		return errors.New("append: data directory opened read-only")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	// Cut first when this sample would stretch the head past a block's
	// duration, so that a block never mixes far-apart times.
	if n := db.head.T.Len(); n >= db.opts.MaxHeadSamples || n > 0 && s.Time-db.head.T.Time[0] >= int64(db.opts.BlockDuration) {
		db.cutLocked()
	}
	h := db.head
	h.Append(s)
	n := h.T.Len() - 1
	db.wal.addSample(h.T.Time[n], h.T.CPU[n], h.T.Thread[n], h.T.Stack[n])
	db.appended.Add(1)
	if db.wal.buffered() >= 4<<20 {
		db.flushWALLocked(false)
	}
	return nil
}

// flushWALLocked writes the WAL's buffer, and syncs the segment if sync,
// freeing disk space once if the disk is full.
func (db *DB) flushWALLocked(sync bool) {
	dropped, err := db.wal.flush(sync)
	if err == nil {
		db.walErr.Store(nil)
		return
	}
	db.walErr.Store(&err)
	db.walDropped.Add(uint64(dropped))
	if errors.Is(err, syscall.ENOSPC) {
		db.diskFull.Store(true) // the background loop frees space
	}
	db.log.Warn("WAL write failed; samples stay in memory until the head is cut", "samples", dropped, "err", err)
}

// cutLocked seals the head and starts a new one; the sealed head is written
// as a block in the background. db.mu must be held.
func (db *DB) cutLocked() {
	if db.head == nil || db.head.T.Len() == 0 {
		return
	}
	old := db.wal
	if err := old.close(); err != nil {
		db.log.Warn("closing WAL segment", "err", err)
	}
	sh := &sealingHead{table: db.head.table(), walSeq: old.seq, periodNs: db.head.periodNs}
	db.sealing = append(db.sealing, sh)
	db.cuts.Add(1)
	if err := db.newHead(old.seq + 1); err != nil {
		// No WAL: keep recording into memory only, retrying at the next cut.
		db.log.Warn("cannot start a WAL segment", "err", err)
		db.head = NewBuilder()
		db.head.periodNs = db.opts.PeriodNs
		db.wal = &walWriter{seq: old.seq + 1, f: devNull()}
	}
	go db.seal(sh)
}

func devNull() *os.File {
	f, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	return f
}

// seal writes a sealed head as a block, then forgets it and its WAL.
func (db *DB) seal(sh *sealingHead) {
	if err := db.writeHead(sh); err != nil {
		db.mu.Lock()
		db.sealing = slices.DeleteFunc(db.sealing, func(x *sealingHead) bool { return x == sh })
		db.mu.Unlock()
		db.lost.Add(uint64(sh.table.Len()))
		db.log.Error("head lost: could not write it as a block", "samples", sh.table.Len(), "err", err)
	}
	os.Remove(walPath(db.dir, sh.walSeq))
}

// writeHead writes a head's samples as a block and adds it in place of the
// head. On a full disk it drops the oldest blocks, one at a time, until the
// write succeeds or nothing is left to drop.
func (db *DB) writeHead(sh *sealingHead) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	for {
		meta, err := writeBlock(filepath.Join(db.dir, blocksDir), Meta{Source: db.opts.Source, Node: cmp.Or(sh.node, db.opts.Node),
			Instance: db.identity.Instance, NodeLabels: db.opts.NodeLabels, WALSegment: sh.walSeq, PeriodNs: sh.periodNs}, sh.table)
		if err == nil {
			if err := db.addBlock(meta, sh, nil); err != nil {
				return err
			}
			if db.opts.OnBlock != nil {
				db.opts.OnBlock(meta)
			}
			return nil
		}
		if !errors.Is(err, syscall.ENOSPC) || !db.dropOldest("disk full") {
			return err
		}
	}
}

// SetPeriod changes the sampling period of the samples appended from now on
// (the recorder's overhead guard changes the frequency). The head is cut
// first, so that every block states the period its samples were taken at.
func (db *DB) SetPeriod(periodNs int64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if periodNs == db.opts.PeriodNs {
		return
	}
	db.opts.PeriodNs = periodNs
	if db.opts.ReadOnly || db.head == nil {
		return
	}
	if db.head.T.Len() > 0 {
		db.cutLocked() // the new head and its segment take the new period
		return
	}
	// Nothing taken at the old period: the empty head takes the new one,
	// and its segment says so (replay keeps the last period record).
	db.head.periodNs = periodNs
	db.wal.setPeriod(periodNs)
}

// addBlock opens a newly written block and adds it to the list. In the
// same critical section it forgets what the block replaces, the head it
// was sealed from or the blocks it was merged from (either may be nil), so
// that no query plans both and counts their samples twice.
func (db *DB) addBlock(meta Meta, from *sealingHead, parents []*Block) error {
	b, err := db.openLocal(filepath.Join(db.dir, blocksDir, meta.ID))
	if err != nil {
		return err
	}
	db.mu.Lock()
	db.blocks = append(slices.DeleteFunc(db.blocks, func(x *Block) bool { return slices.Contains(parents, x) }), b)
	db.sealing = slices.DeleteFunc(db.sealing, func(x *sealingHead) bool { return x == from })
	db.sortBlocks()
	db.mu.Unlock()
	return nil
}

// dropOldest deletes the block with the oldest data; false if none is left.
func (db *DB) dropOldest(why string) bool {
	db.mu.Lock()
	if len(db.blocks) == 0 {
		db.mu.Unlock()
		return false
	}
	oldest := slices.MinFunc(db.blocks, func(a, b *Block) int { return cmp.Compare(a.Meta.MaxTime, b.Meta.MaxTime) })
	db.blocks = slices.DeleteFunc(db.blocks, func(b *Block) bool { return b == oldest })
	db.mu.Unlock()
	db.removeBlock(oldest, why)
	return true
}

func (db *DB) removeBlock(b *Block, why string) {
	db.retire(b)
	if err := os.RemoveAll(b.Dir); err != nil {
		db.log.Warn("delete block", "block", b.Dir, "err", err)
	}
	db.dropped.Add(1)
	if db.unshipped(b) {
		db.unshippedDropped.Add(1)
		db.log.Error("block lost before it was shipped to the bucket", "block", b.Meta.ID, "samples", b.Meta.Samples,
			"minTime", time.Unix(0, b.Meta.MinTime).UTC(), "maxTime", time.Unix(0, b.Meta.MaxTime).UTC(), "why", why)
		return
	}
	db.log.Info("dropped block", "block", b.Meta.ID, "source", b.Meta.Source, "samples", b.Meta.Samples, "why", why)
}

// unshipped reports whether b waits to be copied elsewhere.
func (db *DB) unshipped(b *Block) bool {
	return db.opts.Unshipped != nil && db.opts.Unshipped(&b.Meta)
}

// walFlushInterval is how often the WAL is written: half the one second a
// crash of the agent (SIGKILL, OOM kill) may cost. A page written is safe
// from the agent's crash; only a crash of the kernel (or the machine)
// loses what is not yet synced.
const walFlushInterval = 500 * time.Millisecond

// walSyncInterval is how often the WAL is fsynced: what a kernel crash or
// power loss may cost. fsync was a fifth of the recorder's steady-state
// CPU when every 500 ms write was synced.
const walSyncInterval = 5 * time.Second

// tickSlack is how early Tick does work that is due.
const tickSlack = 50 * time.Millisecond

// background flushes the WAL twice a second, cuts the head when it is old
// enough, and compacts and applies retention every minute.
func (db *DB) background() {
	defer close(db.done)
	tick := time.NewTicker(walFlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-db.stop:
			return
		case now := <-tick.C:
			if db.periodic(now) {
				db.Maintain()
			}
		}
	}
}

// Tick does the store's periodic work when it is due (Options.CallerTicks):
// every 500 ms it writes and syncs the WAL and the event log and cuts the
// head when it is old enough, and every minute it starts a round of
// compaction and retention on a goroutine of its own. Calls in between
// cost a clock read. Call it from one goroutine at a time.
func (db *DB) Tick() {
	if db.opts.ReadOnly || db.closed.Load() {
		return
	}
	now := time.Now()
	// A tick due in less than half a poll is done now, so that polls
	// every 100 ms flush every 500 ms, not every 600.
	if now.Sub(db.lastTick) < walFlushInterval-tickSlack {
		return
	}
	db.lastTick = now
	if db.periodic(now) && db.maintainBusy.CompareAndSwap(false, true) {
		db.maintaining.Go(func() {
			defer db.maintainBusy.Store(false)
			db.Maintain()
		})
	}
}

// periodic syncs the event log, writes the WAL (syncing it every
// walSyncInterval), cuts the head
// when it spans a block's duration and frees space after a full disk. It
// reports whether a minute has passed since compaction and retention last
// ran (and then counts them as run).
func (db *DB) periodic(now time.Time) (maintain bool) {
	db.events.sync()
	db.mu.Lock()
	sync := now.Sub(db.lastSync) >= walSyncInterval-tickSlack
	if sync {
		db.lastSync = now
	}
	db.flushWALLocked(sync)
	if h := db.head; h.T.Len() > 0 && now.UnixNano()-h.T.Time[0] >= int64(db.opts.BlockDuration) {
		db.cutLocked()
	}
	db.mu.Unlock()
	if db.diskFull.Swap(false) {
		db.dropOldest("disk full")
	}
	if now.Sub(db.lastMaintain) < time.Minute {
		return false
	}
	db.lastMaintain = now
	return true
}

// Maintain runs one round of compaction and retention.
func (db *DB) Maintain() { db.maintainAt(time.Now()) }

// maintainAt runs compaction and retention as at time now (tests drive a
// week of synthetic time through it).
func (db *DB) maintainAt(now time.Time) {
	if db.opts.ReadOnly {
		return
	}
	if err := db.compact(now); err != nil {
		db.log.Warn("compaction failed", "err", err)
	}
	db.applyRetention(now)
}

// Flush writes the WAL buffer to disk and syncs it.
func (db *DB) Flush() {
	if db.opts.ReadOnly {
		return
	}
	db.mu.Lock()
	db.flushWALLocked(true)
	db.mu.Unlock()
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
	var err error
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
	if db.events != nil {
		db.events.close()
	}
	db.mu.Lock()
	for _, b := range db.blocks {
		db.closedBlocks++
		db.closedBytes += b.Meta.Bytes
		b.Close()
	}
	db.blocks = nil
	db.mu.Unlock()
	if db.lock != nil {
		db.lock.Close()
	}
	return err
}

// Stats returns the DB's counters.
func (db *DB) Stats() Stats {
	db.mu.RLock()
	defer db.mu.RUnlock()
	s := Stats{Appended: db.appended.Load(), Lost: db.lost.Load(), WALDropped: db.walDropped.Load(),
		Cuts: db.cuts.Load(), Compactions: db.compactions.Load(), RetentionDrop: db.dropped.Load(),
		UnshippedDropped: db.unshippedDropped.Load(),
		CorruptSkips:     db.corrupt.Load(), Blocks: len(db.blocks), Sealing: len(db.sealing)}
	warmStep := db.warmStep.Load()
	for _, b := range db.blocks {
		s.BlockBytes += b.Meta.Bytes
		if warmStep == 0 || b.Meta.Version < 4 {
			continue
		}
		if c := b.warmSteps.Load(); c != nil && c.step == warmStep {
			s.OverviewWarmBlocks++
		} else if !b.warmFailed.Load() && !tooSparseToWarm(b, warmStep) {
			s.OverviewWarmPending++
		}
	}
	s.CPUSummaryReads, s.OverviewWarmBytes = db.cpuSummaryReads.Load(), db.warmBytes.Load()
	if db.closed.Load() && db.blocks == nil {
		// What the directory held when it was closed (the summary a
		// recorder prints after Close).
		s.Blocks, s.BlockBytes = db.closedBlocks, db.closedBytes
	}
	s.IndexesCached, s.IndexCacheBytes = db.indexes.Len(), db.indexes.Weight()
	s.OverviewStepCellsBytes = db.stepCells.Weight()
	s.IndexReads = db.indexReads.Load()
	if db.head != nil {
		s.HeadSamples = db.head.T.Len()
	}
	if db.wal != nil {
		s.WALBytes = db.wal.size
	}
	db.events.mu.Lock()
	s.Events, s.EventsDropped = db.events.total, db.events.dropped
	db.events.mu.Unlock()
	return s
}

// Health returns nil while the DB works: its directory is there and, when
// it records, its last WAL write succeeded. Otherwise it says what is wrong.
func (db *DB) Health() error {
	if db.closed.Load() {
		return errors.New("data directory closed")
	}
	for i := range db.sourceErr {
		if p := db.sourceErr[i].Load(); p != nil {
			return *p
		}
	}
	if db.local == nil {
		return nil
	}
	dir := db.dir
	if !db.opts.ReadOnly {
		dir = filepath.Join(db.dir, blocksDir)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if p := db.walErr.Load(); p != nil {
		return fmt.Errorf("WAL write failed: %w", *p)
	}
	return nil
}

// Refresh brings a read-only DB up to date with its sources: it opens
// blocks written (or uploaded) since Open or the last Refresh and forgets
// blocks that were deleted or compacted away. A reader beside a running
// recorder calls it every few seconds; data still in the recorder's head
// shows up once the head is cut into a block (record's own server shows it
// at once). A source that cannot be listed keeps the blocks it had; the
// error names it.
func (db *DB) Refresh() error {
	if !db.opts.ReadOnly {
		return nil
	}
	if err := db.events.refresh(); err != nil {
		return err
	}
	db.refreshMu.Lock()
	defer db.refreshMu.Unlock()
	var errs []error
	for i, src := range db.sources {
		db.mu.RLock()
		known := map[string]bool{}
		for _, b := range db.blocks {
			if b.src == src {
				known[b.key] = true
			}
		}
		db.mu.RUnlock()
		added, listed, err := db.listSource(i, known)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		anyGone := false
		for key := range known {
			anyGone = anyGone || !listed[key]
		}
		if len(added) == 0 && !anyGone {
			continue
		}
		// A compacted block replaces its parents even before they are deleted.
		replaced := replacedBy(added)
		db.mu.Lock()
		db.blocks = append(db.blocks, added...)
		var gone []*Block
		db.blocks = slices.DeleteFunc(db.blocks, func(b *Block) bool {
			if b.src == src && (!listed[b.key] || replaced[parentKey{b.src, b.recorded(), b.Meta.ID}]) {
				gone = append(gone, b)
				return true
			}
			return false
		})
		db.sortBlocks()
		db.mu.Unlock()
		for _, b := range gone {
			db.retire(b)
		}
	}
	db.mu.Lock()
	retired := db.separateInstancesLocked()
	db.mu.Unlock()
	for _, b := range retired {
		db.retire(b)
	}
	if err := db.refreshSourceEvents(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// refreshSourceEvents reads the events of the sources that hold some,
// keeping the newest MaxEvents. A source that fails keeps its events out
// until it answers again; the error names it.
func (db *DB) refreshSourceEvents() error {
	var all []events.Event
	var errs []error
	found := false
	for _, src := range db.sources {
		es, ok := src.(EventSource)
		if !ok {
			continue
		}
		found = true
		evs, err := es.Events(context.Background())
		if err != nil {
			errs = append(errs, sourceError(src, fmt.Errorf("events: %w", err)))
		}
		all = append(all, evs...)
	}
	if !found {
		return nil
	}
	slices.SortStableFunc(all, func(a, b events.Event) int { return cmp.Compare(a.Time, b.Time) })
	if limit := db.events.maxEvents; len(all) > limit {
		all = all[len(all)-limit:]
	}
	db.mu.RLock()
	blockNotices := slices.Clone(db.notices)
	db.mu.RUnlock()
	notices := separateEventInstances(all, blockNotices)
	db.mu.Lock()
	db.eventNotices = notices
	db.mu.Unlock()
	db.sourceEvents.Store(&all)
	return errors.Join(errs...)
}
