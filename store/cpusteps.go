package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
)

// NodeCPU is one node's CPU time in consecutive steps: the CPU time of its
// busiest CPU in each step (the "one saturated core" signal that a node
// average hides) and of all its CPUs together.
type NodeCPU struct {
	Node string
	// Labels are the node's labels, from its newest block.
	Labels map[string]string
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

// NodeCPUSteps returns, for every node with samples in r that pass f (by
// name), its CPU time in steps of step ns from r.From, per CPU reduced to
// the busiest CPU and the total. Every sample weighs its own block's (or
// head's) sampling period.
//
// When the filter keeps every thread (it looks at nodes, CPUs and idleness
// only) and r is whole steps of a whole multiple of 10 s, blocks of format
// version 4 answer from their per-CPU 10 s summaries without reading a
// chunk or a table, and keep the answer's share of them per step, so the
// same overview again reads nothing. Other blocks, heads and other filters
// are scanned. Memory is one node's steps × CPUs counters per worker, the
// answer, and per block its cells of the last step length asked.
func (db *DB) NodeCPUSteps(ctx context.Context, r Range, step int64, f *Filter) ([]NodeCPU, Warnings, error) {
	if step <= 0 || r.To <= r.From {
		return nil, nil, fmt.Errorf("node cpu steps: empty range or step")
	}
	n := (r.To - r.From + step - 1) / step
	if n > maxNodeSteps {
		return nil, nil, fmt.Errorf("node cpu steps: %d steps, at most %d", n, maxNodeSteps)
	}
	db.mu.RLock()
	blocks := db.blocksLocked(r, f)
	heads := db.headsLocked(r, f)
	db.mu.RUnlock()

	type nodeWork struct {
		name   string
		labels map[string]string
		newest int64
		blocks []*Block
		heads  []part
	}
	byNode := map[string]*nodeWork{}
	get := func(name string) *nodeWork {
		w := byNode[name]
		if w == nil {
			w = &nodeWork{name: name, newest: -1 << 63}
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
	}
	for _, h := range heads {
		w := get(h.node)
		w.heads = append(w.heads, h)
		if w.labels == nil {
			w.labels = db.opts.NodeLabels
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
					warns[i], errs[i] = db.nodeCPU(wctx, acc, w.blocks, w.heads, r, step, f)
					if errs[i] != nil {
						cancel()
					}
				} else {
					for _, b := range w.blocks {
						b.Close()
					}
				}
				out[i] = acc.result(w.name, w.labels)
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

// add counts n samples of weight w on cpu in step s.
func (a *cpuAcc) add(cpu uint32, s int, n, w int64) {
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
	a.perCPU[cpu][s] += n * w
	a.samples[s] += n
}

// result reduces the per-CPU sums to the busiest CPU and the total.
func (a *cpuAcc) result(node string, labels map[string]string) NodeCPU {
	nc := NodeCPU{Node: node, Labels: labels, BusiestNs: make([]int64, a.steps), BusiestCPU: make([]int32, a.steps),
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

// nodeCPU adds one node's blocks and heads to acc, closing the blocks.
func (db *DB) nodeCPU(ctx context.Context, acc *cpuAcc, blocks []*Block, heads []part, r Range, step int64, f *Filter) (Warnings, error) {
	bucket := int64(summaryBucket) * 1000 // ns
	useSummary := f.cpuSummaryOK() && step%bucket == 0 && r.From%bucket == 0 && (r.To-r.From)%step == 0
	scan := func(b *Batch) error {
		w := b.Weight()
		for _, i := range b.Rows {
			acc.add(b.T.CPU[i], int((b.T.Time[i]-r.From)/step), 1, w)
		}
		return nil
	}
	var warnings Warnings
	for i, b := range blocks {
		if err := ctx.Err(); err != nil {
			for _, rest := range blocks[i:] {
				rest.Close()
			}
			return warnings, err
		}
		if useSummary && b.Meta.Version >= 4 {
			cells, err := db.blockCPUSteps(b, r, step, f.IncludeIdle)
			if errors.Is(err, ErrUnavailable) {
				for _, rest := range blocks[i:] {
					rest.Close()
				}
				return warnings, err
			}
			if err != nil {
				warnings = db.skipped(warnings, err)
				b.Close()
				continue
			}
			addCPUSteps(acc, cells, f, r, step, weightOf(b.Meta.PeriodNs))
			b.Close()
			continue
		}
		// Scan the block's chunks in r.
		if err := b.header(); err != nil {
			if errors.Is(err, ErrUnavailable) {
				for _, rest := range blocks[i:] {
					rest.Close()
				}
				return warnings, err
			}
			warnings = db.skipped(warnings, err)
			b.Close()
			continue
		}
		var parts []part
		for ci, c := range b.chunks {
			if r.overlaps(c.minTime*1000, c.maxTime*1000+999) {
				b.acquire()
				parts = append(parts, part{source: b.Meta.Source, node: b.Meta.Node, block: b, chunk: ci})
			}
		}
		b.Close()
		more, err := db.selectParts(ctx, parts, r, f, scan)
		warnings = append(warnings, more...)
		if err != nil {
			for _, rest := range blocks[i+1:] {
				rest.Close()
			}
			return warnings, err
		}
	}
	more, err := db.selectParts(ctx, heads, r, f, scan)
	return append(warnings, more...), err
}

// cpuStepCells is a block's non-idle (or, with idle, every) sample count
// per CPU per step of one step length and phase: what the overview of
// every thread needs of the block, kept once computed so that drawing the
// same overview again reads nothing. It holds a cell per step the block
// touches per CPU, so its memory is about the overview's answer's times
// the node's CPUs, whatever the block's threads.
type cpuStepCells struct {
	step, phase int64
	idle        bool
	cells       []cpuStepCell
}

type cpuStepCell struct {
	k   int64 // step index from time 0 at the phase: ⌊(t − phase) / step⌋
	cpu uint32
	n   uint32
}

// blockCPUSteps returns b's cells for steps of step at r.From's phase,
// from its cache or computed from its per-CPU summary section alone (no
// table is read: a day's block of 8 CPUs has 70 000 cells). Its cache is
// the cells WarmCPUSteps kept and those of the last step asked. The caller
// holds a reference to b.
func (db *DB) blockCPUSteps(b *Block, r Range, step int64, idle bool) (*cpuStepCells, error) {
	phase := r.From % step
	for _, c := range []*cpuStepCells{b.warmSteps.Load(), b.cpuSteps.Load()} {
		if c != nil && c.step == step && c.phase == phase && c.idle == idle {
			return c, nil
		}
	}
	c, err := db.cpuStepCells(b, step, phase, idle)
	if err != nil {
		return nil, err
	}
	b.cpuSteps.Store(c)
	return c, nil
}

// cpuStepCells computes b's cells for steps of step at phase from its
// per-CPU summary section. The caller holds a reference to b.
func (db *DB) cpuStepCells(b *Block, step, phase int64, idle bool) (*cpuStepCells, error) {
	if err := b.header(); err != nil {
		return nil, err
	}
	raw, err := readSection(b.data, b.sections[sectionCPUSummary], b.tocOffset)
	if err != nil {
		return nil, fmt.Errorf("block %s section %d: %w", b, sectionCPUSummary, err)
	}
	db.cpuSummaryReads.Add(1)
	sum, err := decodeSummary(raw, "cpu summary", maxSummaryCPU)
	if err != nil {
		return nil, fmt.Errorf("block %s: %w", b, err)
	}
	bucket := int64(summaryBucket) * 1000
	c := &cpuStepCells{step: step, phase: phase, idle: idle}
	if len(sum.cells) == 0 {
		return c, nil
	}
	stepOf := func(e summaryCell) int64 { return floorDiv((sum.base+int64(e.bucket))*bucket-phase, step) }
	// Cells are in bucket order, so steps ascend: count into a dense
	// steps × CPUs array when it is not much larger than the cells
	// (CPU numbers are dense), else into a map.
	k0, k1 := stepOf(sum.cells[0]), stepOf(sum.cells[len(sum.cells)-1])
	cpus := int64(0)
	for _, e := range sum.cells {
		cpus = max(cpus, int64(e.key)+1)
	}
	count := func(e summaryCell) uint32 {
		if idle {
			return e.count
		}
		return e.count - e.idle
	}
	if size := (k1 - k0 + 1) * cpus; size <= 4*int64(len(sum.cells))+1024 {
		dense := make([]uint32, size)
		for _, e := range sum.cells {
			dense[(stepOf(e)-k0)*cpus+int64(e.key)] += count(e)
		}
		for i, n := range dense {
			if n > 0 {
				c.cells = append(c.cells, cpuStepCell{k: k0 + int64(i)/cpus, cpu: uint32(int64(i) % cpus), n: n})
			}
		}
	} else {
		type key struct {
			k   int64
			cpu uint32
		}
		counts := map[key]uint32{}
		for _, e := range sum.cells {
			if n := count(e); n > 0 {
				counts[key{stepOf(e), e.key}] += n
			}
		}
		for k, n := range counts {
			c.cells = append(c.cells, cpuStepCell{k: k.k, cpu: k.cpu, n: n})
		}
	}
	c.cells = slices.Clip(c.cells)
	return c, nil
}

// addCPUSteps adds a block's cells in r on the CPUs f keeps to acc.
// r.From is a multiple of the step plus the cells' phase and r is whole
// steps, so every cell lies wholly inside or outside r.
func addCPUSteps(acc *cpuAcc, c *cpuStepCells, f *Filter, r Range, step, weight int64) {
	first := floorDiv(r.From-c.phase, step)
	for _, e := range c.cells {
		if len(f.CPUs) > 0 && !slices.Contains(f.CPUs, e.cpu) {
			continue
		}
		if s := e.k - first; s >= 0 && s < int64(acc.steps) {
			acc.add(e.cpu, int(s), int64(e.n), weight)
		}
	}
}
