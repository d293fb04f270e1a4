// What the DB counts and whether it works: Stats and Health.

package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

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
	// CPUSummaryReads counts blocks' per-CPU summary sections read
	// (ReadCPUSteps): the fleet overview's cache misses and its warming's
	// reads, and the timelines'.
	CPUSummaryReads uint64
	Events          int    // system events kept
	EventsDropped   uint64 // system events deleted by retention
}

// Stats returns what the Reader counts: its blocks, caches, per-CPU
// summary reads and the events; a DB's Stats adds the writer's.
func (rd *Reader) Stats() Stats {
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	s := Stats{CorruptSkips: rd.corrupt.Load(), Blocks: len(rd.blocks)}
	for _, b := range rd.blocks {
		s.BlockBytes += b.Meta.Bytes
	}
	s.CPUSummaryReads = rd.cpuSummaryReads.Load()
	if rd.closed.Load() && rd.blocks == nil {
		// What the directory held when it was closed (the summary a
		// recorder prints after Close).
		s.Blocks, s.BlockBytes = rd.closedBlocks, rd.closedBytes
	}
	s.IndexesCached, s.IndexCacheBytes = rd.indexes.Len(), rd.indexes.Weight()
	s.IndexReads = rd.indexReads.Load()
	rd.events.mu.Lock()
	s.Events, s.EventsDropped = rd.events.total, rd.events.dropped
	rd.events.mu.Unlock()
	return s
}

// Stats returns the DB's counters: its Reader's and the writer's.
func (db *DB) Stats() Stats {
	s := db.Reader.Stats()
	s.Appended, s.Lost, s.WALDropped = db.appended.Load(), db.lost.Load(), db.walDropped.Load()
	s.Cuts, s.Compactions, s.RetentionDrop = db.cuts.Load(), db.compactions.Load(), db.dropped.Load()
	s.UnshippedDropped = db.unshippedDropped.Load()
	db.mu.RLock()
	defer db.mu.RUnlock()
	s.Sealing = len(db.sealing)
	if db.head != nil {
		s.HeadSamples = db.head.T.Len()
	}
	if db.wal != nil {
		s.WALBytes = db.wal.size
	}
	return s
}

// Health returns nil while the Reader works: its block sources' last
// listings succeeded and its directory, if any, is there. Otherwise it
// says what is wrong.
func (rd *Reader) Health() error {
	if rd.closed.Load() {
		return errors.New("data directory closed")
	}
	for i := range rd.blockSourceErr {
		if p := rd.blockSourceErr[i].Load(); p != nil {
			return *p
		}
	}
	if rd.localBlocks == nil {
		return nil
	}
	dir := rd.dir
	if !rd.opts.ReadOnly {
		dir = filepath.Join(rd.dir, blocksDir)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// Health returns nil while the DB works: its Reader's Health, and, when it
// records, its last WAL write succeeded. Otherwise it says what is wrong.
func (db *DB) Health() error {
	if err := db.Reader.Health(); err != nil {
		return err
	}
	if p := db.walErr.Load(); p != nil {
		return fmt.Errorf("WAL write failed: %w", *p)
	}
	return nil
}
