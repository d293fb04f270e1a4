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
	for i := range db.blockSourceErr {
		if p := db.blockSourceErr[i].Load(); p != nil {
			return *p
		}
	}
	if db.localBlocks == nil {
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
