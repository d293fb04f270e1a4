package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/heatscope/heatscope/lru"
)

// NodeCPU is one node's CPU time in consecutive steps: the CPU time of its
// busiest CPU in each step (the "one saturated core" signal that a node
// average hides) and of all its CPUs together.
type NodeCPU struct {
	Node string
	// Labels are the node's labels, from its newest block.
	Labels map[string]string
	// CoveredNs is, per step, the wall time in ns of the step that the
	// node's data cover: the step's length, less what lies before the
	// CPU time of its first sample in the range's blocks and heads (that
	// sample's period before it) or after its last sample (the data's
	// end: a live head, a node whose newest block is still to come).
	// No CPU's time in a step exceeds it: a busy share is CPU time over
	// CoveredNs, at most 1.
	CoveredNs []int64
	// BusiestNs is, per step, the CPU time in ns of the CPU that had the
	// most in that step, and BusiestCPU that CPU (-1 when the step has no
	// sample).
	BusiestNs  []int64
	BusiestCPU []int32
	// TotalNs is, per step, the CPU time in ns of every CPU together, and
	// Samples the samples it stands for.
	TotalNs []int64
	Samples []int64
}

// maxNodeSteps bounds the steps of NodeCPUSteps: a node's accumulator
// holds steps × CPUs counters.
const maxNodeSteps = 100_000

// CPUStepsCache keeps blocks' per-CPU steps between reads: NodeCPUSteps
// asks it first and gives it the steps it read. The fleet overview's
// (overview.Cells) holds the warm steps and a zoom's; the Reader keeps its
// own for its timelines (Timeline), or keeps them in the one a query
// service gives it (KeepStepsIn: the overview's, one budget for both).
type CPUStepsCache interface {
	// CPUSteps returns b's steps that serve r at step (CPUSteps.Serves)
	// with or without idle samples, or nil.
	CPUSteps(b *Block, r Range, step int64, idle bool) *CPUSteps
	// KeepCPUSteps keeps steps read of b.
	KeepCPUSteps(b *Block, c *CPUSteps)
}

// NodeCPUSteps returns, for every node with samples in r that pass f (by
// name), its CPU time in steps of step ns from r.From, per CPU reduced to
// the busiest CPU and the total. Every sample weighs its own block's (or
// head's) sampling period.
//
// A CPU's time in a step is the CPU time its samples stand for within the
// step's wall time, never more than the wall time the node's data cover
// in it (NodeCPU.CoveredNs). Scanned samples are spread over their period
// before them, not before the same CPU's previous sample (Since, Spread),
// as /api/percpu does, so that holds by construction; a summary gives each
// sample whole to its 10 s bucket, so a step read from summaries may hold
// up to a period from beside it (the first sample's period partly before
// the step, a sample delayed by timer jitter next to one on time), which
// is cut at the covered time.
//
// When the filter keeps every thread (it looks at nodes, CPUs and idleness
// only) and r is whole steps of a whole multiple of 10 s, blocks of format
// version 4 answer from their per-CPU 10 s summaries without reading a
// chunk or a table: from the steps cache holds for them (nil: none), else
// from steps read at step over r (ReadCPUSteps), which cache then keeps.
// Other blocks, heads and other filters are scanned. Memory is one node's
// steps × CPUs counters per worker and the answer.
func (rd *Reader) NodeCPUSteps(ctx context.Context, r Range, step int64, f *Filter, cache CPUStepsCache) ([]NodeCPU, Warnings, error) {
	if step <= 0 || r.To <= r.From {
		return nil, nil, fmt.Errorf("node cpu steps: empty range or step")
	}
	n := (r.To - r.From + step - 1) / step
	if n > maxNodeSteps {
		return nil, nil, fmt.Errorf("node cpu steps: %d steps, at most %d", n, maxNodeSteps)
	}
	rd.mu.RLock()
	blocks := rd.blocksLocked(r, f)
	heads := rd.headsLocked(r, f)
	rd.mu.RUnlock()

	type nodeWork struct {
		name   string
		labels map[string]string
		newest int64
		// data is the wall time the node's data cover: from its first
		// sample's period to its last sample.
		data   Range
		blocks []*Block
		heads  []part
	}
	byNode := map[string]*nodeWork{}
	get := func(name string) *nodeWork {
		w := byNode[name]
		if w == nil {
			w = &nodeWork{name: name, newest: math.MinInt64, data: Range{From: math.MaxInt64, To: math.MinInt64}}
			byNode[name] = w
		}
		return w
	}
	for _, b := range blocks {
		w := get(b.Meta.Node)
		w.blocks = append(w.blocks, b)
		if b.Meta.MaxTime >= w.newest {
			w.labels, w.newest = b.Meta.NodeLabels, b.Meta.MaxTime
		}
		w.data.From = min(w.data.From, b.Meta.MinTime-weightOf(b.Meta.PeriodNs))
		w.data.To = max(w.data.To, b.Meta.MaxTime)
	}
	for _, h := range heads {
		w := get(h.node)
		w.heads = append(w.heads, h)
		if w.labels == nil {
			w.labels = rd.opts.NodeLabels
		}
		if h.head.Len() > 0 {
			w.data.From = min(w.data.From, slices.Min(h.head.Time)-weightOf(h.periodNs))
			w.data.To = max(w.data.To, slices.Max(h.head.Time))
		}
	}
	work := slices.SortedFunc(maps.Values(byNode), func(a, b *nodeWork) int { return cmp.Compare(a.name, b.name) })

	out := make([]NodeCPU, len(work))
	warns := make([]Warnings, len(work))
	errs := make([]error, len(work))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), max(len(work), 1)) {
		wg.Go(func() {
			acc := &cpuAcc{steps: int(n)}
			for i := range next {
				w := work[i]
				acc.reset()
				if wctx.Err() == nil {
					warns[i], errs[i] = rd.nodeCPU(wctx, acc, w.blocks, w.heads, r, step, f, cache)
					if errs[i] != nil {
						cancel()
					}
				} else {
					for _, b := range w.blocks {
						b.Close()
					}
				}
				out[i] = acc.result(w.name, w.labels, covered(r, step, w.data))
			}
		})
	}
	for i := range work {
		next <- i
	}
	close(next)
	wg.Wait()
	var warnings Warnings
	for i := range work {
		for _, w := range warns[i] {
			if !slices.Contains(warnings, w) {
				warnings = append(warnings, w)
			}
		}
	}
	// The first error that is not the cancellation it caused.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, warnings, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, warnings, err
	}
	// A node whose blocks the filter emptied is still listed: it has
	// samples, none that pass, which the caller may say.
	return out, warnings, nil
}

// covered is, per step of step from r.From, the wall time of the step
// within r that data covers.
func covered(r Range, step int64, data Range) []int64 {
	n := (r.To - r.From + step - 1) / step
	out := make([]int64, n)
	for s := range out {
		from := r.From + int64(s)*step
		to := min(from+step, r.To)
		out[s] = max(0, min(to, data.To)-max(from, data.From))
	}
	return out
}

// cpuAcc sums one node's CPU time per CPU per step.
type cpuAcc struct {
	steps   int
	perCPU  [][]int64 // [cpu][step] ns; nil for CPUs never seen
	inUse   []bool    // per CPU: has samples in this node
	used    []uint32  // the CPUs in use
	samples []int64
}

func (a *cpuAcc) reset() {
	for _, c := range a.used {
		clear(a.perCPU[c])
		a.inUse[c] = false
	}
	a.used = a.used[:0]
	if a.samples == nil {
		a.samples = make([]int64, a.steps)
	}
	clear(a.samples)
}

// add counts n samples of weight w on cpu in step s, each whole.
func (a *cpuAcc) add(cpu uint32, s int, n, w int64) {
	a.addNs(cpu, s, n*w)
	a.samples[s] += n
}

// addNs adds ns of CPU time on cpu in step s.
func (a *cpuAcc) addNs(cpu uint32, s int, ns int64) {
	if int(cpu) >= len(a.perCPU) {
		grow := int(cpu) + 1 - len(a.perCPU)
		a.perCPU = append(a.perCPU, make([][]int64, grow)...)
		a.inUse = append(a.inUse, make([]bool, grow)...)
	}
	if !a.inUse[cpu] {
		if a.perCPU[cpu] == nil {
			a.perCPU[cpu] = make([]int64, a.steps)
		}
		a.inUse[cpu] = true
		a.used = append(a.used, cpu)
	}
	a.perCPU[cpu][s] += ns
}

// result reduces the per-CPU sums, each cut at the wall time the node's
// data cover in its step (coveredNs), to the busiest CPU and the total.
func (a *cpuAcc) result(node string, labels map[string]string, coveredNs []int64) NodeCPU {
	nc := NodeCPU{Node: node, Labels: labels, CoveredNs: coveredNs, BusiestNs: make([]int64, a.steps), BusiestCPU: make([]int32, a.steps),
		TotalNs: make([]int64, a.steps), Samples: slices.Clone(a.samples)}
	if nc.Labels == nil {
		nc.Labels = map[string]string{}
	}
	for s := range a.steps {
		nc.BusiestCPU[s] = -1
	}
	slices.Sort(a.used)
	for _, c := range a.used {
		row := a.perCPU[c]
		for s, ns := range row {
			ns = min(ns, coveredNs[s])
			nc.TotalNs[s] += ns
			if ns > nc.BusiestNs[s] {
				nc.BusiestNs[s], nc.BusiestCPU[s] = ns, int32(c)
			}
		}
	}
	return nc
}

// cpuSummaryOK reports whether per-CPU summaries can answer f: it keeps
// every thread and looks at nothing a summary lacks (frames, the stack
// part).
func (f *Filter) cpuSummaryOK() bool { return f.allThreads() && f.Frame == nil && f.Stack == AllFrames }

// blockCPU adds block b to acc, from its per-CPU summary (through cache)
// when useSummary allows, else by scanning its chunks in r, and closes it. A block that
// cannot be read is added to warnings; the context's end, an unavailable
// source (ErrUnavailable) and a scan's error end the node.
func (rd *Reader) blockCPU(ctx context.Context, acc *cpuAcc, b *Block, warnings Warnings, useSummary bool, r Range, step int64, f *Filter, cache CPUStepsCache, scan func(*Batch) error) (Warnings, error) {
	defer b.Close()
	if err := ctx.Err(); err != nil {
		return warnings, err
	}
	skip := func(err error) (Warnings, error) {
		if errors.Is(err, ErrUnavailable) {
			return warnings, err
		}
		return rd.skipped(warnings, err), nil
	}
	if useSummary && b.Meta.Version >= 4 {
		cells, err := rd.cachedCPUSteps(cache, b, r, step, f.IncludeIdle)
		if err != nil {
			return skip(err)
		}
		addCPUSteps(acc, cells, f, r, step, weightOf(b.Meta.PeriodNs))
		return warnings, nil
	}
	if err := b.header(); err != nil {
		return skip(err)
	}
	more, err := rd.selectParts(ctx, b.chunkParts(r), r, f, scan)
	return append(warnings, more...), err
}

// nodeCPU adds one node's blocks and heads to acc, closing the blocks.
func (rd *Reader) nodeCPU(ctx context.Context, acc *cpuAcc, blocks []*Block, heads []part, r Range, step int64, f *Filter, cache CPUStepsCache) (Warnings, error) {
	bucket := int64(summaryBucket) * 1000 // ns
	useSummary := f.cpuSummaryOK() && step%bucket == 0 && r.From%bucket == 0 && (r.To-r.From)%step == 0
	// A scanned sample's CPU time is spread over its period before it, as
	// /api/percpu spreads it: given whole to the step holding it, the
	// first sample of a step brought CPU time from the step before.
	var last LastSample
	var cpu uint32
	addNs := func(s, ns int64) { acc.addNs(cpu, int(s), ns) }
	scan := func(b *Batch) error {
		w := b.Weight()
		for _, i := range b.Rows {
			t := b.T.Time[i]
			cpu = b.T.CPU[i]
			acc.addNs(cpu, int((t-r.From)/step), 0)
			acc.samples[(t-r.From)/step]++
			Spread(Since(t, w, last.Swap(cpu, t)), t, r.From, r.To, step, addNs)
		}
		return nil
	}
	var warnings Warnings
	for i, b := range blocks {
		var err error
		if warnings, err = rd.blockCPU(ctx, acc, b, warnings, useSummary, r, step, f, cache, scan); err != nil {
			for _, rest := range blocks[i+1:] {
				rest.Close()
			}
			return warnings, err
		}
	}
	more, err := rd.selectParts(ctx, heads, r, f, scan)
	return append(warnings, more...), err
}

// CPUSteps is a block's non-idle (or, with idle, every) sample count per
// CPU per step of one step length and phase, over a time range: what the
// overview of every thread needs of the block, read from its per-CPU
// summary (ReadCPUSteps). The counts are dense, steps × the CPUs with
// samples, 4 bytes each: a 12-hour block of 8 CPUs at 2-minute steps is
// 11.5 KB. Immutable once read.
//
// Steps of length s serve any step that is a whole multiple of s at the
// same phase (the coarser steps of the overview's ladder): a coarse step
// sums its fine steps per CPU before the busiest CPU is taken (cpuAcc),
// so the busiest CPU's share is that of the coarse step, not the highest
// of the fine ones.
type CPUSteps struct {
	step, phase int64
	idle        bool
	// from and to bound the time the steps cover (ns): the range they
	// were read over.
	from, to int64
	// k0 is the first step's index from time 0 at the phase,
	// ⌊(t − phase) / step⌋; cpus the CPUs with samples, ascending;
	// counts[(k − k0)·len(cpus) + j] the samples of cpus[j] in step k.
	k0     int64
	cpus   []uint32
	counts []uint32
}

// Serves reports whether c can answer an overview of r (whole steps of
// step, from r.From) with or without idle samples.
func (c *CPUSteps) Serves(r Range, step int64, idle bool) bool {
	return c.idle == idle && step%c.step == 0 && (r.From-c.phase)%c.step == 0 && c.from <= r.From && r.To <= c.to
}

// Step, Phase and Idle are the step length (ns) and phase c was read at,
// and whether it counts idle samples.
func (c *CPUSteps) Step() int64  { return c.step }
func (c *CPUSteps) Phase() int64 { return c.phase }
func (c *CPUSteps) Idle() bool   { return c.idle }

// Bytes approximates the memory c holds.
func (c *CPUSteps) Bytes() int64 {
	return int64(unsafe.Sizeof(*c)) + 4*int64(cap(c.cpus)+cap(c.counts))
}

// defaultStepCellsBytes is Options.StepCellsBytes's default: a timeline of
// 500 nodes' hour at 10 s steps (360 steps × 8 CPUs × 4 bytes a block) is
// 5.8 MB of steps.
const defaultStepCellsBytes = 16 << 20

// timelineSteps is the Reader's own CPUStepsCache, for its timelines
// (Timeline) until KeepStepsIn gives it another: each block's steps of
// the last step asked, bounded by Options.StepCellsBytes.
type timelineSteps struct{ lru *lru.Cache[*Block, *CPUSteps] }

func (t timelineSteps) CPUSteps(b *Block, r Range, step int64, idle bool) *CPUSteps {
	if c, ok := t.lru.Get(b); ok && c.Serves(r, step, idle) {
		return c
	}
	return nil
}

func (t timelineSteps) KeepCPUSteps(b *Block, c *CPUSteps) {
	t.lru.Remove(b)
	t.lru.AddIf(b, c, func() bool { return !b.retired.Load() })
}

// stepsCache holds the CPUStepsCache a Reader's timelines keep their
// steps in.
type stepsCache struct{ CPUStepsCache }

// KeepStepsIn makes c, in place of the Reader's own cache (within
// Options.StepCellsBytes, emptied now), where its timelines of every
// thread keep blocks' per-CPU steps: one bound then covers them and what
// c keeps besides. A query service gives its overview.Cells' (Timelines),
// so that the timelines' steps and the fleet overview's zooms share one
// budget, and a timeline reads no summary that an overview's steps serve.
func (rd *Reader) KeepStepsIn(c CPUStepsCache) {
	rd.timelineSteps.Store(&stepsCache{c})
	rd.ownSteps.lru.RemoveFunc(func(*Block) bool { return true })
}

// cachedCPUSteps returns steps of b that serve r at step: those cache
// holds (nil: none), else steps read at step over r from b's per-CPU
// summary section alone (no table is read) and given to cache. The caller
// holds a reference to b.
func (rd *Reader) cachedCPUSteps(cache CPUStepsCache, b *Block, r Range, step int64, idle bool) (*CPUSteps, error) {
	if cache != nil {
		if c := cache.CPUSteps(b, r, step, idle); c != nil {
			return c, nil
		}
	}
	c, err := rd.ReadCPUSteps(b, step, r.From%step, idle, r)
	if err != nil {
		return nil, err
	}
	if cache != nil {
		cache.KeepCPUSteps(b, c)
	}
	return c, nil
}

// CPUSummaryBlocks returns the blocks with a per-CPU summary (format
// version 4 or later), each with a reference the caller drops with
// Block.Close: what the fleet overview's warming reads.
func (rd *Reader) CPUSummaryBlocks() []*Block {
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	var blocks []*Block
	for _, b := range rd.blocks {
		if b.Meta.Version >= 4 {
			b.acquire()
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// ReadCPUSteps reads b's per-CPU summary section (no table) and sums it
// in steps of step at phase over r (all time: math.MinInt64 to
// math.MaxInt64), counting idle samples or not. Nothing is kept: the
// callers cache what they read (CPUStepsCache). Stats counts the reads
// (CPUSummaryReads). The caller holds a reference to b (CPUSummaryBlocks,
// or a query's); a block of a format before version 4 (no per-CPU
// summary) is an error.
func (rd *Reader) ReadCPUSteps(b *Block, step, phase int64, idle bool, r Range) (*CPUSteps, error) {
	if b.Meta.Version < 4 {
		return nil, fmt.Errorf("block %s: format version %d has no per-CPU summary", b, b.Meta.Version)
	}
	if step <= 0 {
		return nil, fmt.Errorf("block %s: per-CPU steps of %d ns", b, step)
	}
	if err := b.header(); err != nil {
		return nil, err
	}
	raw, err := readSection(b.data, b.sections[sectionCPUSummary], b.tocOffset)
	if err != nil {
		return nil, fmt.Errorf("block %s section %d: %w", b, sectionCPUSummary, err)
	}
	rd.cpuSummaryReads.Add(1)
	sum, err := decodeSummary(raw, "cpu summary", maxSummaryCPU)
	if err != nil {
		return nil, fmt.Errorf("block %s: %w", b, err)
	}
	c := &CPUSteps{step: step, phase: phase, idle: idle, from: r.From, to: r.To}
	bucket := int64(summaryBucket) * 1000
	// The entries in r with samples to count, their steps and CPUs.
	in := func(e summaryCell) (int64, uint32, bool) {
		t := (sum.base + int64(e.bucket)) * bucket
		n := e.count
		if !idle {
			n -= e.idle
		}
		return floorDiv(t-phase, step), n, n > 0 && t >= r.From && t < r.To
	}
	var col []int32 // per CPU number: its index in c.cpus, plus one
	k1 := int64(0)
	for _, e := range sum.cells {
		k, _, ok := in(e)
		if !ok {
			continue
		}
		if len(c.cpus) == 0 {
			c.k0 = k
		}
		k1 = k
		if int(e.key) >= len(col) {
			col = append(col, make([]int32, int(e.key)+1-len(col))...)
		}
		if col[e.key] == 0 {
			col[e.key] = 1
			c.cpus = append(c.cpus, e.key)
		}
	}
	if len(c.cpus) == 0 {
		return c, nil
	}
	slices.Sort(c.cpus)
	for j, cpu := range c.cpus {
		col[cpu] = int32(j + 1)
	}
	// Entries are in bucket order, so k0 and k1 are the first and last
	// steps: the counts cover the block's span in r, gaps included.
	c.counts = make([]uint32, (k1-c.k0+1)*int64(len(c.cpus)))
	for _, e := range sum.cells {
		if k, n, ok := in(e); ok {
			c.counts[(k-c.k0)*int64(len(c.cpus))+int64(col[e.key]-1)] += n
		}
	}
	return c, nil
}

// addCPUSteps adds the cells of c in r on the CPUs f keeps to acc, in
// steps of step (a whole multiple of c.step). r.From is a multiple of
// c.step plus c's phase and r is whole steps, so every cell lies wholly
// inside or outside r and inside one step.
func addCPUSteps(acc *cpuAcc, c *CPUSteps, f *Filter, r Range, step, weight int64) {
	if len(c.cpus) == 0 {
		return
	}
	keep := make([]bool, len(c.cpus))
	for j, cpu := range c.cpus {
		keep[j] = len(f.CPUs) == 0 || slices.Contains(f.CPUs, cpu)
	}
	first, per := floorDiv(r.From-c.phase, c.step), step/c.step
	ncpu := int64(len(c.cpus))
	k0 := max(c.k0, first)
	k1 := min(c.k0+int64(len(c.counts))/ncpu, first+int64(acc.steps)*per)
	for k := k0; k < k1; k++ {
		s := int((k - first) / per)
		row := c.counts[(k-c.k0)*ncpu : (k-c.k0+1)*ncpu]
		for j, n := range row {
			if n > 0 && keep[j] {
				acc.add(c.cpus[j], s, int64(n), weight)
			}
		}
	}
}
