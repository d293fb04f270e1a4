package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"
)

// WarmResult says what a WarmCPUSteps pass did.
type WarmResult struct {
	// Step is the step length (ns) warmed.
	Step int64
	// Warmed counts the blocks whose per-CPU summary this pass read;
	// Cached those it found already warm; Pending those left cold (the
	// memory budget was spent, or the pass was cancelled); Failed those
	// whose summary could not be read (corrupt: no pass reads them again,
	// the queries that need them warn); Sparse those left to the queries
	// because their cells would cover far more steps than they have
	// samples (an import spread over months: warm cells are dense over a
	// block's whole span, a query's only over its range).
	Warmed, Cached, Pending, Failed, Sparse int
	// Bytes is the approximate memory the warm cells of every block hold
	// after the pass.
	Bytes int64
	// Took is how long the pass ran.
	Took time.Duration
}

// WarmCPUSteps reads, one block at a time in the caller's goroutine, the
// per-CPU summary of every block of format version 4 or later that is not
// yet warm for step, and keeps the block's cells for steps of step at
// phase 0 (the steps of an overview whose range is aligned to its step,
// as the web API aligns it), apart from the cache of the cells queries
// asked for: a fleet overview of every thread at that step, or at any
// whole multiple of it, then reads no block at all, the first after a
// start included. The cells kept this way have a budget of
// Options.IndexCacheBytes of their own, beside the index cache's: past it
// the remaining blocks stay cold (counted as Pending) and are read by the
// query that needs them, as without warming; so are blocks too sparse for
// dense cells (Sparse). Between blocks it yields the processor, so that
// the queries being served go first. It stops early when ctx is done; a block
// whose summary cannot be read is left to the queries, which warn about
// it, and no later pass reads it again. Stats reports the progress
// (OverviewWarmBlocks, OverviewWarmPending).
func (rd *Reader) WarmCPUSteps(ctx context.Context, step int64) (WarmResult, error) {
	start := time.Now()
	res := WarmResult{Step: step}
	if step <= 0 || step%(int64(summaryBucket)*1000) != 0 {
		return res, fmt.Errorf("warm cpu steps: step %d ns is not a whole multiple of the summaries' 10 s", step)
	}
	rd.mu.RLock()
	var blocks []*Block
	for _, b := range rd.blocks {
		if b.Meta.Version >= 4 {
			b.acquire()
			blocks = append(blocks, b)
		}
	}
	rd.mu.RUnlock()
	defer func() {
		for _, b := range blocks {
			b.Close()
		}
	}()
	cold := make([]*Block, 0, len(blocks))
	for _, b := range blocks {
		if c := b.warmSteps.Load(); c != nil && c.step == step && c.phase == 0 && !c.idle {
			res.Cached++
			continue
		}
		if b.warmFailed.Load() {
			res.Failed++
			continue
		}
		if tooSparseToWarm(b, step) {
			res.Sparse++
			continue
		}
		cold = append(cold, b)
	}
	rd.warmStep.Store(step)
	failedBefore := res.Failed
	var err error
	for _, b := range cold {
		if err = ctx.Err(); err != nil {
			break
		}
		if rd.warmBytes.Load() >= rd.opts.IndexCacheBytes {
			break
		}
		runtime.Gosched()
		if b.retired.Load() {
			continue
		}
		c, cerr := rd.cpuStepCells(b, step, 0, false, Range{From: math.MinInt64, To: math.MaxInt64})
		if errors.Is(cerr, ErrUnavailable) {
			err = cerr
			break
		}
		if cerr != nil {
			b.warmFailed.Store(true) // a query warns about it
			res.Failed++
			continue
		}
		if old := b.warmSteps.Swap(c); old != nil {
			rd.warmBytes.Add(-old.bytes())
		}
		rd.warmBytes.Add(c.bytes())
		if b.retired.Load() {
			rd.unwarm(b) // retired meanwhile: retire may have missed these cells
		}
		res.Warmed++
	}
	res.Pending = len(cold) - res.Warmed - (res.Failed - failedBefore)
	res.Bytes = rd.warmBytes.Load()
	res.Took = time.Since(start)
	return res, err
}

// tooSparseToWarm reports whether b's warm cells at step would hold more
// steps than b has samples (plus a little): dense over the block's whole
// span, they would be mostly empty, and unbounded for a block whose few
// samples lie months apart.
func tooSparseToWarm(b *Block, step int64) bool {
	steps := (b.Meta.MaxTime-b.Meta.MinTime)/step + 1
	return steps > int64(b.Meta.Samples)+4096
}

// bytes approximates the memory c holds.
func (c *cpuStepCells) bytes() int64 {
	return int64(unsafe.Sizeof(*c)) + 4*int64(cap(c.cpus)+cap(c.counts))
}

// unwarm drops b's warm cells (b leaves the DB).
func (rd *Reader) unwarm(b *Block) {
	if old := b.warmSteps.Swap(nil); old != nil {
		rd.warmBytes.Add(-old.bytes())
	}
}
