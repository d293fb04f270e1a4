package store

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"

	"github.com/heatscope/heatscope/sample"
)

// Range is a half-open time range [From, To) in Unix nanoseconds.
type Range struct{ From, To int64 }

// overlaps reports whether [min, max] (inclusive) meets r.
func (r Range) overlaps(min, max int64) bool { return min < r.To && max >= r.From }

// Batch is the samples of one table that passed a filter.
type Batch struct {
	// Source is where the samples came from, and Node the machine they
	// were taken on.
	Source, Node string
	// T holds the samples and the tables their ids index.
	T *Table
	// Rows are the indices in T of the matching samples.
	Rows []int32
	// PeriodNs is the sampling period every sample of the batch was taken
	// at, in nanoseconds of CPU time (0 when unknown, as for folded stacks
	// imported without one): what each sample weighs. A batch is one
	// block's chunk or one head, and each of those has one period.
	PeriodNs int64
	// KeepFrame, when not nil, says which frames (by id) the filter's
	// stack part keeps; the others must be left out of stacks.
	KeepFrame []bool
	// ClockShift is what was added to an import's own clock to place it
	// at wall time (Meta.ClockShift; 0 for recorded data): T.Time less
	// ClockShift is the capture's time.
	ClockShift int64
}

// DefaultPeriodNs is what a sample weighs when its data states no period
// (folded stacks imported without one): 1/99 s, the rate heatscope and
// perf users sample at by default.
var DefaultPeriodNs = sample.PeriodOf(99)

// Weight is the CPU time, in nanoseconds, each sample of b stands for: its
// period, or DefaultPeriodNs when that is unknown.
func (b *Batch) Weight() int64 { return weightOf(b.PeriodNs) }

func weightOf(periodNs int64) int64 {
	if periodNs > 0 {
		return periodNs
	}
	return DefaultPeriodNs
}

// Warnings lists data a query had to skip (a corrupt chunk, a block that
// vanished) and samples its filter could not judge (CgroupPathsUnknown);
// the answer covers everything else.
type Warnings []error

// part is one unit of work for Select: a chunk of a block, or a head.
type part struct {
	source string
	node   string
	block  *Block
	chunk  int
	head   *Table
	mask   *compiled // for heads, compiled at plan time
	// periodNs is a head's sampling period (blocks state theirs).
	periodNs int64
}

// release drops the reference to its block that plan took.
func (p *part) release() {
	if p.block != nil {
		p.block.Close()
	}
}

// Select calls fn with the samples in r that pass f: one batch per chunk or
// head, chunks in time order. Chunks are decoded on all CPUs, a few ahead
// of fn, and cached; fn is called from one goroutine. Data that cannot be
// read is skipped and named in the returned Warnings.
func (rd *Reader) Select(ctx context.Context, r Range, f *Filter, fn func(*Batch) error) (Warnings, error) {
	parts, warnings, err := rd.plan(r, f)
	if err != nil {
		return warnings, err
	}
	more, err := rd.selectParts(ctx, parts, r, f, fn)
	return append(warnings, more...), err
}

func (rd *Reader) selectParts(ctx context.Context, parts []part, r Range, f *Filter, fn func(*Batch) error) (Warnings, error) {
	type result struct {
		batch *Batch
		err   error
	}
	results := make([]chan result, len(parts))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	ctx, cancel := context.WithCancel(ctx)
	// A query's work ends with it: on an early return (the request was
	// cancelled, fn failed) the parts under way are waited for, so their
	// CPU and memory are the query's, not some later moment's (the
	// overhead guard counts a query's CPU as it is served).
	var workers sync.WaitGroup
	defer func() {
		cancel()
		workers.Wait()
	}()
	masks := &maskCache{f: f, m: map[*Block]*compiled{}}
	inFlight := make(chan struct{}, 2*runtime.GOMAXPROCS(0))
	workers.Go(func() {
		for i := range parts {
			select {
			case inFlight <- struct{}{}:
			case <-ctx.Done():
				for j := i; j < len(parts); j++ {
					parts[j].release()
				}
				return
			}
			workers.Go(func() {
				b, err := rd.runPart(&parts[i], r, masks)
				parts[i].release()
				results[i] <- result{b, err}
			})
		}
	})
	var warnings Warnings
	for i := range parts {
		var res result
		select {
		case res = <-results[i]:
			<-inFlight
		case <-ctx.Done():
			return warnings, ctx.Err()
		}
		if res.err != nil {
			if errors.Is(res.err, ErrUnavailable) {
				return warnings, res.err
			}
			warnings = rd.skipped(warnings, res.err)
			continue
		}
		if res.batch == nil || len(res.batch.Rows) == 0 {
			continue
		}
		if err := fn(res.batch); err != nil {
			return warnings, err
		}
	}
	return append(warnings, masks.pathWarnings(parts)...), nil
}

// skipped records that a query skipped unreadable data: counted, logged
// and added to its warnings, once (a damaged index fails every chunk of its
// block with the same error).
func (rd *Reader) skipped(warnings Warnings, err error) Warnings {
	if slices.Contains(warnings, err) {
		return warnings
	}
	rd.corrupt.Add(1)
	rd.log.Warn("query skipped unreadable data", "err", err)
	return append(warnings, err)
}

// plan lists the block chunks and the heads that may hold samples in r.
// Each block part holds a reference to its block, dropped by part.release
// once it has been read. A block whose header cannot be read is skipped
// and named in the warnings, unless its storage is unavailable: that fails
// the plan.
func (rd *Reader) plan(r Range, f *Filter) ([]part, Warnings, error) {
	rd.mu.RLock()
	blocks := rd.blocksLocked(r, f)
	heads := rd.headsLocked(r, f)
	rd.mu.RUnlock()
	errs := openHeaders(blocks)
	var parts []part
	var warnings Warnings
	for i, b := range blocks {
		if err := errs[i]; err != nil {
			if errors.Is(err, ErrUnavailable) {
				for _, p := range parts {
					p.release()
				}
				for _, rest := range blocks[i:] {
					rest.Close()
				}
				return nil, warnings, err
			}
			warnings = rd.skipped(warnings, err)
			b.Close()
			continue
		}
		parts = append(parts, b.chunkParts(r)...)
		b.Close()
	}
	return append(parts, heads...), warnings, nil
}

// chunkParts returns the parts of b's chunks that may hold samples in r,
// each holding a reference to b. b's header has been read.
func (b *Block) chunkParts(r Range) []part {
	var parts []part
	for i, c := range b.chunks {
		if r.overlaps(c.minTime*1000, c.maxTime*1000+999) {
			b.acquire()
			parts = append(parts, part{source: b.Meta.Source, node: b.Meta.Node, block: b, chunk: i})
		}
	}
	return parts
}

// headerReads bounds the block headers read at once.
const headerReads = 16

// openHeaders reads the headers of the blocks not opened yet, several at a
// time: a block of a bucket costs two round trips (its size, its tail), and
// a cold query of a node's 10 minutes meets several such blocks. It
// returns each block's error (nil for the blocks opened): the caller's
// loop takes them rather than reading a header again, which for a storage
// that does not answer (whose errors the blocks do not keep) would wait
// its timeout once more.
func openHeaders(blocks []*Block) []error {
	errs := make([]error, len(blocks))
	var wg sync.WaitGroup
	sem := make(chan struct{}, headerReads)
	for i, b := range blocks {
		if b.opened.Load() {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = b.header()
		})
	}
	wg.Wait()
	return errs
}

// blocksLocked returns the blocks that may hold samples in r that pass f,
// each with a reference taken for the caller. db.mu must be held.
func (rd *Reader) blocksLocked(r Range, f *Filter) []*Block {
	var blocks []*Block
	for _, b := range rd.blocks {
		if f.keepsBlock(&b.Meta) && r.overlaps(b.Meta.MinTime, b.Meta.MaxTime) {
			b.acquire()
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// maskCache compiles a filter once per block for one query.
type maskCache struct {
	f  *Filter
	mu sync.Mutex
	m  map[*Block]*compiled
}

func (mc *maskCache) get(b *Block, ix *blockIndex) *compiled {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	c, ok := mc.m[b]
	if !ok {
		c = compile(mc.f, ix.tables, &ix.idle)
		mc.m[b] = c
	}
	return c
}

// pathWarnings names, once each, the heads and the blocks read whose
// samples the filter could not judge by cgroup path.
func (mc *maskCache) pathWarnings(parts []part) Warnings {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	var warnings Warnings
	seen := map[*Block]bool{}
	for _, p := range parts {
		mask, block := p.mask, ""
		if p.block != nil {
			if seen[p.block] {
				continue
			}
			seen[p.block] = true
			mask, block = mc.m[p.block], p.block.String()
		}
		if mask == nil {
			continue
		}
		if w := mask.pathWarning(p.node, block); w != nil {
			warnings = append(warnings, w)
		}
	}
	return warnings
}

// runPart reads one part and returns its matching rows.
func (rd *Reader) runPart(p *part, r Range, masks *maskCache) (*Batch, error) {
	t, mask, period := p.head, p.mask, p.periodNs
	var shift int64
	if p.block != nil {
		period, shift = p.block.Meta.PeriodNs, p.block.Meta.ClockShift
		ix, err := rd.blockIndex(p.block)
		if err != nil {
			return nil, err
		}
		if t, err = rd.chunk(p.block, ix, p.chunk); err != nil {
			return nil, err
		}
		mask = masks.get(p.block, ix)
	}
	b := &Batch{Source: p.source, Node: p.node, T: t, KeepFrame: mask.keepFrame, PeriodNs: period, ClockShift: shift}
	for i, ts := range t.Time {
		if ts >= r.From && ts < r.To && mask.keeps(t, i) {
			b.Rows = append(b.Rows, int32(i))
		}
	}
	return b, nil
}

type chunkKey struct {
	block *Block
	chunk int
}

// defaultChunkCacheSamples bounds the decoded-chunk cache: 2 M samples,
// about 40 MB (20 bytes a sample). Decoding is fast enough (a cold
// 10-minute heatmap of 64 CPUs, 3.8 M samples, takes ~70 ms) that the
// cache serves the common case, flame graphs and top tables of windows
// inside the span just drawn, not whole heatmaps.
const defaultChunkCacheSamples = 2 << 20

// chunk returns chunk i of b, from the cache of decoded chunks (bounded
// by their samples) or decoded into it.
func (rd *Reader) chunk(b *Block, ix *blockIndex, i int) (*Table, error) {
	key := chunkKey{b, i}
	if t, ok := rd.chunks.Get(key); ok {
		return t, nil
	}
	t, err := b.readChunk(ix, i)
	if err != nil {
		return nil, err
	}
	rd.chunks.AddIf(key, t, func() bool { return !b.retired.Load() })
	return t, nil
}

// retire drops a block that has left db.blocks: its cached index and
// chunks, and the DB's reference. Queries that planned to read it still
// can.
func (rd *Reader) retire(b *Block) {
	b.retired.Store(true)
	rd.chunks.RemoveFunc(func(k chunkKey) bool { return k.block == b })
	rd.indexes.Remove(b)
	rd.ownSteps.lru.Remove(b)
	b.Close()
}

// defaultIndexCacheBytes bounds the index cache. A 2-minute block's index
// is tens to hundreds of KB; a 12-hour one's a few MB, more under process
// churn.
const defaultIndexCacheBytes = 32 << 20

// blockIndex returns b's index, from the cache or read from b's file (the
// caller holds a reference to b).
func (rd *Reader) blockIndex(b *Block) (*blockIndex, error) {
	if ix, ok := rd.indexes.Get(b); ok {
		return ix, nil
	}
	if err := b.header(); err != nil {
		return nil, err
	}
	b.loading.Lock()
	defer b.loading.Unlock()
	if ix, ok := rd.indexes.Get(b); ok {
		return ix, nil // read by another query meanwhile
	}
	if b.indexErr != nil {
		return nil, b.indexErr
	}
	rd.indexReads.Add(1)
	ix, err := b.readIndex()
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			b.indexErr = err
		}
		return nil, err
	}
	rd.indexes.AddIf(b, ix, func() bool { return !b.retired.Load() })
	return ix, nil
}

// LastSample remembers each CPU's last sample time, for Since: by CPU
// number in a slice up to a few thousand CPUs, in a map beyond (a CPU
// number is untrusted input of imported data). The zero value is ready.
type LastSample struct {
	near []int64
	far  map[uint32]int64
}

// lastSampleNear bounds the CPU numbers kept in the slice.
const lastSampleNear = 4096

// Swap records t as cpu's last sample and returns the one before (0: none).
func (l *LastSample) Swap(cpu uint32, t int64) (prev int64) {
	if cpu < lastSampleNear {
		if int(cpu) >= len(l.near) {
			l.near = append(l.near, make([]int64, int(cpu)+1-len(l.near))...)
		}
		prev, l.near[cpu] = l.near[cpu], t
		return prev
	}
	if l.far == nil {
		l.far = map[uint32]int64{}
	}
	prev, l.far[cpu] = l.far[cpu], t
	return prev
}

// Since is when the CPU time a sample taken at t, of period w, stands
// for starts: its period just before it, but not before the same CPU's
// previous sample at last (timer jitter brings samples closer than a
// period, and the CPU was not busy twice over).
func Since(t, w, last int64) int64 {
	if last > t-w && last <= t {
		return last
	}
	return t - w
}

// Spread hands out the CPU time a sample stands for, [lo, hi) (see Since;
// hi is the sample's time), to the steps of step nanoseconds from from
// that it overlaps, clipped to [from, to): add(i, ns) for step i and the
// overlap's length. A view finer than the sampling period (a 20 ms cell,
// a 50 ms step at 24 Hz) thus shows a busy CPU busy for the whole of each
// step and never for more: given whole to the step holding the sample, a
// period of 41.7 ms made a 20 ms cell hold 41.7 ms of one CPU, and the
// cells between samples none.
func Spread(lo, hi, from, to, step int64, add func(i, ns int64)) {
	lo, hi = max(lo, from), min(hi, to)
	for lo < hi {
		i := (lo - from) / step
		end := min(hi, from+(i+1)*step)
		add(i, end-lo)
		lo = end
	}
}
