// The writer's head: samples appended to memory and the WAL, cut into
// blocks when old or large enough.

package store

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// sealedWAL is the highest WAL segment the directory's blocks hold (the
// copies a bucket holds too included). The caller holds db.mu or owns db.
func (db *DB) sealedWAL() uint64 {
	var sealed uint64
	for _, b := range slices.Concat(db.blocks, db.shadowed) {
		if b.src == db.localBlocks {
			sealed = max(sealed, b.Meta.WALSegment)
		}
	}
	return sealed
}

// Refresh brings a read-only DB up to date (Reader.Refresh) and forgets
// the WAL segments it replayed at open that the recorder has written as
// blocks since: their samples are read from the blocks now, once.
func (db *DB) Refresh() error {
	err := db.Reader.Refresh()
	if db.opts.ReadOnly {
		db.mu.Lock()
		sealed := db.sealedWAL()
		db.sealing = slices.DeleteFunc(db.sealing, func(s *sealingHead) bool { return s.walSeq <= sealed })
		db.mu.Unlock()
	}
	return err
}

// loadWAL replays the WAL segments not yet in blocks. A writer turns each
// into a block and starts a new segment; a reader keeps them in memory.
func (db *DB) loadWAL() error {
	if db.localBlocks == nil {
		return nil
	}
	seqs, err := walSegments(db.dir)
	if err != nil {
		return err
	}
	sealed := db.sealedWAL()
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

// ErrNotDurable is what Append's error wraps when the sample was added to
// the head but the WAL cannot be written (a full or read-only disk): the
// sample is kept in memory until the head is cut into a block, and a crash
// before then loses it. Appends say so until a WAL write succeeds again.
var ErrNotDurable = errors.New("sample kept in memory only")

// Append adds a sample to the head. Its error wraps ErrNotDurable while
// the WAL cannot be written (the sample is added all the same); any other
// error means the sample was not added.
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
	if p := db.walErr.Load(); p != nil {
		return fmt.Errorf("append: %w: WAL write failed: %w", ErrNotDurable, *p)
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
	var serves time.Duration
	if t := sh.table.Time; len(t) > 0 {
		serves = time.Duration(t[len(t)-1] - t[0])
	}
	end := db.upkeepUnit()
	defer end(serves)
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

// liveParts lists the heads as parts for its Reader (liveHeads), with
// db.mu held: what it lists and the blocks the caller lists under the same
// lock are one consistent view (a head being sealed is in exactly one of
// the sealing heads and the blocks).
func (db *DB) liveParts(r Range, f *Filter) []part {
	var parts []part
	if f.keepsSource(db.opts.Source) && f.KeepsNode(db.opts.Node, db.opts.NodeLabels) {
		add := func(h *Table, period int64) {
			parts = append(parts, part{source: db.opts.Source, node: db.opts.Node, head: h, mask: compile(f, h, nil), periodNs: period})
		}
		for _, s := range db.sealing {
			add(s.table.snapshot(), s.periodNs)
		}
		if db.head != nil && db.head.T.Len() > 0 {
			add(db.head.T.snapshot(), db.head.periodNs)
		}
	}
	return parts
}

// liveSpans calls fn with the first and last sample times and the sample
// count of each non-empty table not yet in a block: the heads being sealed,
// then the head (liveHeads). The caller holds db.mu.
func (db *DB) liveSpans(fn func(first, last int64, n int)) {
	heads := []*Table{}
	for _, s := range db.sealing {
		heads = append(heads, s.table)
	}
	if db.head != nil {
		heads = append(heads, &db.head.T)
	}
	for _, h := range heads {
		if h.Len() > 0 {
			fn(slices.Min(h.Time), slices.Max(h.Time), h.Len())
		}
	}
}
