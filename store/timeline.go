package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Steps is a timeline: per step, the samples and the CPU time they stand
// for.
type Steps struct {
	// Samples counts the samples of each step.
	Samples []int64
	// CPUNs is the CPU time of each step in nanoseconds: every sample
	// weighs its own block's (or head's) sampling period, so a rate
	// change does not change it. Scanned, a sample's period is spread
	// over the time before it (Spread), as /api/percpu spreads it; from
	// the 10 s summaries, which give each sample whole to its step, it
	// is cut at the CPU time of every thread of the nodes kept in the
	// step (NodeCPU.TotalNs), so that it never exceeds the CPUs' wall
	// time in the step either.
	CPUNs []int64
}

// Timeline counts the samples in r that pass f, and the CPU time they
// stand for, in consecutive steps of step nanoseconds, starting at r.From;
// the last step may be partial.
//
// When the filter looks only at threads (process, thread, command, cgroup,
// container metadata, idleness), step is a whole multiple of 10 s and r
// whole steps from a multiple of 10 s, blocks answer from
// their per-thread 10-second summaries without reading any chunk: that is
// what makes a day-long overview cheap. Otherwise samples are scanned. A
// filter that keeps every thread is answered from each block's totals per
// 10 s, kept in memory once read: the overview of a week retained reads no
// index after the first.
func (rd *Reader) Timeline(ctx context.Context, r Range, step int64, f *Filter) (*Steps, Warnings, error) {
	if step <= 0 || r.To <= r.From {
		return nil, nil, fmt.Errorf("timeline: empty range or step")
	}
	n := (r.To - r.From + step - 1) / step
	if n > 1_000_000 {
		return nil, nil, fmt.Errorf("timeline: %d steps, at most 1000000", n)
	}
	tl := &Steps{Samples: make([]int64, n), CPUNs: make([]int64, n)}
	var last LastSample // each CPU's last sample, for Since
	addCPU := func(s, ns int64) { tl.CPUNs[s] += ns }
	scan := func(b *Batch) error {
		w := b.Weight()
		for _, i := range b.Rows {
			t := b.T.Time[i]
			tl.Samples[(t-r.From)/step]++
			Spread(Since(t, w, last.Swap(b.T.CPU[i], t)), t, r.From, r.To, step, addCPU)
		}
		return nil
	}
	bucket := int64(summaryBucket) * 1000 // ns
	if !f.threadOnly() || step%bucket != 0 || r.From%bucket != 0 || (r.To-r.From)%step != 0 {
		warnings, err := rd.Select(ctx, r, f, scan)
		return tl, warnings, err
	}
	warnings, err := rd.timelineSummaries(ctx, tl, r, step, f, scan)
	if err != nil {
		return nil, warnings, err
	}
	// A summary gives each sample whole to its 10 s, so a step could
	// hold a period from the step before (its first sample's) on top of
	// its own wall time: 20.06 CPU-seconds in 10 s on 2 CPUs never idle.
	// Cut it at what every thread of the nodes kept had in the step,
	// each CPU at most the wall time the node's data cover in it.
	all := Filter{Sources: f.Sources, Nodes: f.Nodes, NodeRegex: f.NodeRegex, NodeLabels: f.NodeLabels, IncludeIdle: f.IncludeIdle}
	nodes, more, err := rd.NodeCPUSteps(ctx, r, step, &all, rd.timelineSteps.Load().CPUStepsCache)
	for _, w := range more {
		if !slices.Contains(warnings, w) {
			warnings = append(warnings, w)
		}
	}
	if err != nil {
		return nil, warnings, err
	}
	for s := range tl.CPUNs {
		var capNs int64
		for _, n := range nodes {
			capNs += n.TotalNs[s]
		}
		tl.CPUNs[s] = min(tl.CPUNs[s], capNs)
	}
	return tl, warnings, nil
}

// timelineSummaries adds to tl the samples in r that pass f (which looks
// only at threads) and their CPU time, from the blocks' 10 s summaries,
// and from the heads by scanning them.
func (rd *Reader) timelineSummaries(ctx context.Context, tl *Steps, r Range, step int64, f *Filter, scan func(*Batch) error) (Warnings, error) {
	bucket := int64(summaryBucket) * 1000 // ns
	// Blocks and heads under one lock: a head sealed in between would be
	// in neither list, or in both.
	rd.mu.RLock()
	blocks := rd.blocksLocked(r, f)
	heads := rd.headsLocked(r, f)
	rd.mu.RUnlock()
	add := func(b int64, count, idle uint32, weight int64) {
		start := b * bucket
		if start < r.From || start >= r.To {
			return
		}
		c := int64(count)
		if !f.IncludeIdle {
			c -= int64(idle)
		}
		s := (start - r.From) / step
		tl.Samples[s] += c
		tl.CPUNs[s] += c * weight
	}
	allThreads := f.allThreads()
	var warnings Warnings
	for i, b := range blocks {
		if err := ctx.Err(); err != nil {
			for _, rest := range blocks[i:] {
				rest.Close()
			}
			return warnings, err
		}
		weight := weightOf(b.Meta.PeriodNs)
		if totals := b.totals.Load(); allThreads && totals != nil {
			b.Close()
			for _, e := range *totals {
				add(e.bucket, e.count, e.idle, weight)
			}
			continue
		}
		ix, err := rd.blockIndex(b)
		b.Close()
		if errors.Is(err, ErrUnavailable) {
			for _, rest := range blocks[i+1:] {
				rest.Close()
			}
			return warnings, err
		}
		if err != nil {
			warnings = rd.skipped(warnings, err)
			continue
		}
		if allThreads {
			totals := sumBuckets(ix.summary)
			b.totals.Store(&totals)
		}
		mask := compile(f, ix.tables, &ix.idle)
		if w := mask.pathWarning(b.Meta.Node, b.String()); w != nil {
			warnings = append(warnings, w)
		}
		for _, e := range ix.summary.cells {
			if mask.threadOK[e.key] {
				add(ix.summary.base+int64(e.bucket), e.count, e.idle, weight)
			}
		}
	}
	// Heads have no summaries: scan them.
	headWarnings, err := rd.selectParts(ctx, heads, r, f, scan)
	return append(warnings, headWarnings...), err
}
