package store

import (
	"context"
	"errors"
	"fmt"
)

// Timeline counts the samples in r that pass f in consecutive steps of
// step nanoseconds, starting at r.From; the last step may be partial.
//
// When the filter looks only at threads (process, thread, command, cgroup,
// container metadata, idleness) and r and step are whole multiples of 10 s, blocks answer from
// their per-thread 10-second summaries without reading any chunk: that is
// what makes a day-long overview cheap. Otherwise samples are scanned. A
// filter that keeps every thread is answered from each block's totals per
// 10 s, kept in memory once read: the overview of a week retained reads no
// index after the first.
func (db *DB) Timeline(ctx context.Context, r Range, step int64, f *Filter) ([]int64, Warnings, error) {
	if step <= 0 || r.To <= r.From {
		return nil, nil, fmt.Errorf("timeline: empty range or step")
	}
	n := (r.To - r.From + step - 1) / step
	if n > 1_000_000 {
		return nil, nil, fmt.Errorf("timeline: %d steps, at most 1000000", n)
	}
	counts := make([]int64, n)
	bucket := int64(summaryBucket) * 1000 // ns
	if !f.threadOnly() || step%bucket != 0 || r.From%bucket != 0 || r.To%bucket != 0 {
		warnings, err := db.Select(ctx, r, f, func(b *Batch) error {
			for _, i := range b.Rows {
				counts[(b.T.Time[i]-r.From)/step]++
			}
			return nil
		})
		return counts, warnings, err
	}
	// Blocks and heads under one lock: a head sealed in between would be
	// in neither list, or in both.
	db.mu.RLock()
	blocks := db.blocksLocked(r, f)
	heads := db.headsLocked(r, f)
	db.mu.RUnlock()
	add := func(b int64, count, idle uint32) {
		start := b * bucket
		if start < r.From || start >= r.To {
			return
		}
		c := int64(count)
		if !f.IncludeIdle {
			c -= int64(idle)
		}
		counts[(start-r.From)/step] += c
	}
	allThreads := f.allThreads()
	var warnings Warnings
	for i, b := range blocks {
		if err := ctx.Err(); err != nil {
			for _, rest := range blocks[i:] {
				rest.Close()
			}
			return nil, warnings, err
		}
		if totals := b.totals.Load(); allThreads && totals != nil {
			b.Close()
			for _, e := range *totals {
				add(e.bucket, e.count, e.idle)
			}
			continue
		}
		ix, err := db.blockIndex(b)
		b.Close()
		if errors.Is(err, ErrUnavailable) {
			for _, rest := range blocks[i+1:] {
				rest.Close()
			}
			return nil, warnings, err
		}
		if err != nil {
			warnings = db.skipped(warnings, err)
			continue
		}
		if allThreads {
			totals := sumBuckets(ix.summary)
			b.totals.Store(&totals)
		}
		mask := compile(f, ix.tables, &ix.idle)
		for _, e := range ix.summary.cells {
			if mask.threadOK[e.thread] {
				add(ix.summary.base+int64(e.bucket), e.count, e.idle)
			}
		}
	}
	// Heads have no summaries: scan them.
	headWarnings, err := db.selectParts(ctx, heads, r, f, func(b *Batch) error {
		for _, i := range b.Rows {
			counts[(b.T.Time[i]-r.From)/step]++
		}
		return nil
	})
	return counts, append(warnings, headWarnings...), err
}
