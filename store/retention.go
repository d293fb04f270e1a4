package store

import (
	"cmp"
	"math"
	"os"
	"slices"
	"time"
)

// applyRetention deletes blocks past the age limit (but not those still to
// be shipped), then the oldest blocks while the total size is over the size
// limit (shipped or not). A block's age runs from its
// newest sample, or for imported data (which keeps its own, possibly
// ancient, timestamps) from when it was imported.
func (db *DB) applyRetention(now time.Time) {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	db.mu.Lock()
	var doomed []*Block
	sizeDropped := false
	if db.opts.Retention > 0 {
		cutoff := now.Add(-db.opts.Retention).UnixNano()
		for _, b := range db.blocks {
			if blockAge(b) < cutoff && !db.unshipped(b) {
				doomed = append(doomed, b)
			}
		}
	}
	if db.opts.RetentionSize > 0 {
		byAge := slices.Clone(db.blocks)
		slices.SortFunc(byAge, func(a, b *Block) int { return cmp.Compare(blockAge(a), blockAge(b)) })
		var total int64
		for _, b := range byAge {
			if !slices.Contains(doomed, b) {
				total += b.Meta.Bytes
			}
		}
		for _, b := range byAge {
			if total <= db.opts.RetentionSize {
				break
			}
			if !slices.Contains(doomed, b) {
				doomed = append(doomed, b)
				total -= b.Meta.Bytes
				sizeDropped = sizeDropped || b.Meta.ImportedAt == 0
			}
		}
	}
	db.blocks = slices.DeleteFunc(db.blocks, func(b *Block) bool { return slices.Contains(doomed, b) })
	// Events go with the samples: past the age limit, and older than the
	// oldest recorded sample left when the size limit deleted recorded
	// blocks.
	eventCutoff := int64(math.MinInt64)
	if db.opts.Retention > 0 {
		eventCutoff = now.Add(-db.opts.Retention).UnixNano()
	}
	for _, b := range db.blocks {
		if sizeDropped && b.Meta.ImportedAt == 0 {
			eventCutoff = max(eventCutoff, b.Meta.MinTime)
			break // sorted by MinTime
		}
	}
	db.mu.Unlock()
	for _, b := range doomed {
		db.removeBlock(b, "retention")
	}
	db.events.retain(eventCutoff)
}

// blockAge is the time retention measures a block's age from (Unix ns).
func blockAge(b *Block) int64 {
	if b.Meta.ImportedAt > 0 {
		return b.Meta.ImportedAt * int64(time.Millisecond)
	}
	return b.Meta.MaxTime
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
