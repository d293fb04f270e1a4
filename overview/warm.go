package overview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// BlockLister lists the blocks with a per-CPU summary (*store.Reader),
// each with a reference the caller drops with Block.Close.
type BlockLister interface {
	CPUSummaryBlocks() []*store.Block
}

// WarmStore is what warming reads (*store.Reader).
type WarmStore interface {
	BlockLister
	// SourcesOf gives the recordings' spans (the whole span to warm).
	SourcesOf(f *store.Filter) []store.SourceInfo
	// ReadCPUSteps reads a block's per-CPU summary in steps.
	ReadCPUSteps(b *store.Block, step, phase int64, idle bool, r store.Range) (*store.CPUSteps, error)
}

// WarmResult says what a warming pass did.
type WarmResult struct {
	// Step is the step length (ns) warmed.
	Step int64
	// Warmed counts the blocks whose per-CPU summary this pass read;
	// Cached those it found already warm; Pending those left cold (the
	// memory budget was spent, or the pass was cancelled); Failed those
	// whose summary could not be read (corrupt: no pass reads them again,
	// the queries that need them warn); Sparse those left to the queries
	// because their steps would cover far more steps than they have
	// samples (an import spread over months: warm steps are dense over a
	// block's whole span, a query's only over its range).
	Warmed, Cached, Pending, Failed, Sparse int
	// Bytes is the approximate memory the warm steps of every block hold
	// after the pass.
	Bytes int64
	// Took is how long the pass ran.
	Took time.Duration
}

// Warm warms cells for the overview a user opening the UI's fleet page
// first sees (the whole span of every node of st in columns columns: the
// UI asks for as many as fit its width, three pixels each), and for every
// coarser step of Ladder (a narrower window, a longer span): it reads the
// per-CPU summary of every block not yet warm at that overview's WarmStep,
// in the caller's goroutine (Cells.WarmSteps). With no node yet, it does
// nothing.
func Warm(ctx context.Context, st WarmStore, cells *Cells, columns int) (WarmResult, error) {
	if columns < 1 || columns > MaxColumns {
		return WarmResult{}, fmt.Errorf("warm fleet overview: %d columns, want 1 to %d", columns, MaxColumns)
	}
	var all store.Filter
	r, ok := query.Span(st.SourcesOf(&all), all.Sources)
	if !ok {
		return WarmResult{}, nil
	}
	r.From, r.To = max(r.From, 0), min(r.To, query.MaxTime) // the times a query takes
	return cells.WarmSteps(ctx, st, WarmStep(Step(r, columns)))
}

// WarmSteps reads, one block at a time in the caller's goroutine, the
// per-CPU summary of every block of st with one that is not yet warm for
// step, and keeps the block's steps of step at phase 0 (the steps of an
// overview whose range is aligned to its step, as the web API aligns it),
// apart from a zoom's: a fleet overview of every thread at that step, or
// at any whole multiple of it, then reads no block at all, the first after
// a start included. Past the warm budget (NewCells) the remaining blocks
// stay cold (counted as Pending) and are read by the query that needs
// them, as without warming; so are blocks too sparse for dense steps
// (Sparse). Between blocks it yields the processor, so that the queries
// being served go first. It stops early when ctx is done or st is
// unavailable (store.ErrUnavailable); a block whose summary cannot be
// read is left to the queries, which warn about it, and no later pass
// reads it again. What left st leaves c. Stats reports the progress.
func (c *Cells) WarmSteps(ctx context.Context, st WarmStore, step int64) (WarmResult, error) {
	start := time.Now()
	res := WarmResult{Step: step}
	if step <= 0 || step%int64(10*time.Second) != 0 {
		return res, fmt.Errorf("warm cpu steps: step %d ns is not a whole multiple of the summaries' 10 s", step)
	}
	c.prune()
	blocks := st.CPUSummaryBlocks()
	defer closeAll(blocks)
	cold := make([]*store.Block, 0, len(blocks))
	c.mu.Lock()
	for _, b := range blocks {
		if w := c.warm[b]; w != nil && w.Step() == step && w.Phase() == 0 && !w.Idle() {
			res.Cached++
			continue
		}
		if c.failed[b] {
			res.Failed++
			continue
		}
		if tooSparseToWarm(b, step) {
			res.Sparse++
			continue
		}
		cold = append(cold, b)
	}
	c.warmStep = step
	c.mu.Unlock()
	failedBefore := res.Failed
	all := store.Range{From: math.MinInt64, To: math.MaxInt64}
	var err error
	for _, b := range cold {
		if err = ctx.Err(); err != nil {
			break
		}
		if c.bytes() >= c.warmBudget {
			break
		}
		runtime.Gosched()
		if b.Retired() {
			continue
		}
		s, rerr := st.ReadCPUSteps(b, step, 0, false, all)
		if errors.Is(rerr, store.ErrUnavailable) {
			err = rerr
			break
		}
		c.mu.Lock()
		if rerr != nil {
			c.failed[b] = true // a query warns about it
			res.Failed++
		} else {
			if old := c.warm[b]; old != nil {
				c.warmBytes -= old.Bytes()
			}
			c.warm[b] = s
			c.warmBytes += s.Bytes()
			res.Warmed++
		}
		c.mu.Unlock()
	}
	// Retired meanwhile: their steps leave now.
	c.prune()
	res.Pending = len(cold) - res.Warmed - (res.Failed - failedBefore)
	res.Bytes = c.bytes()
	res.Took = time.Since(start)
	return res, err
}

// bytes is the memory the warm steps hold.
func (c *Cells) bytes() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.warmBytes
}

// tooSparseToWarm reports whether b's warm steps at step would hold more
// steps than b has samples (plus a little): dense over the block's whole
// span, they would be mostly empty, and unbounded for a block whose few
// samples lie months apart.
func tooSparseToWarm(b *store.Block, step int64) bool {
	steps := (b.Meta.MaxTime-b.Meta.MinTime)/step + 1
	return steps > int64(b.Meta.Samples)+4096
}

// Warmer runs the warming passes of a query service (Warm) as blocks
// arrive, logging what each read.
type Warmer struct {
	Store WarmStore
	// Cells keeps the warm steps: the Cells the service's API reads
	// (web.Options.Overview).
	Cells   *Cells
	Columns int
	Logger  *slog.Logger
	// done is set once a pass left nothing pending: passes after it (the
	// blocks that arrive) log at debug level only.
	done bool
}

// Pass runs a pass, logging what it read and how long it took when it
// read anything. Call it from one goroutine at a time.
func (w *Warmer) Pass(ctx context.Context) {
	res, err := Warm(ctx, w.Store, w.Cells, w.Columns)
	if err != nil && ctx.Err() == nil {
		w.Logger.Warn("warm the fleet overview", "err", err, "warmed", res.Warmed, "pending", res.Pending)
		return
	}
	if res.Warmed == 0 {
		return
	}
	level := slog.LevelInfo
	if w.done {
		level = slog.LevelDebug
	}
	w.done = w.done || res.Pending == 0
	w.Logger.Log(ctx, level, "warmed the fleet overview", "blocks", res.Warmed, "alreadyWarm", res.Cached, "pending", res.Pending, "corrupt", res.Failed, "sparse", res.Sparse,
		"step", time.Duration(res.Step), "bytes", res.Bytes, "took", res.Took.Round(time.Millisecond))
}
