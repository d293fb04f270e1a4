package store

import (
	"cmp"
	"math"
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
