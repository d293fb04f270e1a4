package query

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/heatscope/heatscope/store"
)

// PerCPU gives the CPU time (and the samples) per CPU per time step, to
// show a saturated CPU that the average over all of them hides.
type PerCPU struct {
	// Start is the Unix time (seconds) of step 0, the range's start; Step
	// is each step's length in seconds.
	Start float64 `json:"start"`
	Step  float64 `json:"step"`
	// CPUs lists the CPU numbers that have samples, ascending, one row
	// each; Nodes the node of each row. Samples of several nodes are
	// never added into one CPU: each node's CPU is a row of its own, by
	// node then CPU (CPU 0 of two nodes, each busy, is two rows 100%
	// busy, not one 200%).
	CPUs  []uint32 `json:"cpus"`
	Nodes []string `json:"nodes"`
	// Counts holds the counts, Counts[row][step index], the row being
	// the position in CPUs and Nodes. Step i covers
	// [Start + i·Step, Start + (i+1)·Step); the last may be partial.
	// Counts depend on the sampling rate: show CPU instead.
	Counts [][]int `json:"counts"`
	// Unit names what CPU holds: "cpu-seconds".
	Unit string `json:"unit"`
	// CPU holds the CPU time in seconds, CPU[cpu index][step index], each
	// sample weighing its own sampling period, spread over that period
	// before it (see store.Spread); over Step seconds a busy CPU has CPU = Step,
	// never more.
	CPU [][]float64 `json:"cpu"`
}

// MaxPerCPUSteps and MaxPerCPUs bound a per-CPU view's size.
const (
	MaxPerCPUSteps = 10_000
	MaxPerCPUs     = 4096
)

// ErrTooManyCPUs is returned (wrapped) by PerCPUOf when the samples come
// from more than MaxPerCPUs CPUs: filter on fewer.
var ErrTooManyCPUs = errors.New("too many CPUs")

// PerCPUOf counts the samples in r that pass f per node and CPU and per
// step of step nanoseconds, from r.From, and sums the CPU time they stand
// for.
func PerCPUOf(ctx context.Context, db Selector, r store.Range, f *store.Filter, step int64) (*PerCPU, store.Warnings, error) {
	if step < 1 {
		return nil, nil, fmt.Errorf("per-CPU: step %d ns, want at least 1", step)
	}
	if r.To <= r.From {
		return nil, nil, fmt.Errorf("per-CPU: empty range")
	}
	width := r.To - r.From // both ends are times, so no overflow
	n := width / step
	if width%step != 0 {
		n++
	}
	if n > MaxPerCPUSteps {
		return nil, nil, fmt.Errorf("per-CPU: %d steps, at most %d", n, MaxPerCPUSteps)
	}
	steps := int(n)
	type row struct {
		counts []int
		cpuNs  []int64
		last   int64 // the time of the CPU's last sample
	}
	type nodeCPU struct {
		node string
		cpu  uint32
	}
	rows := map[nodeCPU]*row{}
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		w := b.Weight()
		for _, i := range b.Rows {
			key := nodeCPU{b.Node, b.T.CPU[i]}
			rw, ok := rows[key]
			if !ok {
				if len(rows) == MaxPerCPUs {
					return fmt.Errorf("per-CPU: %w: samples from more than %d CPUs", ErrTooManyCPUs, MaxPerCPUs)
				}
				rw = &row{counts: make([]int, steps), cpuNs: make([]int64, steps)}
				rows[key] = rw
			}
			t := b.T.Time[i]
			if s := (t - r.From) / step; s >= 0 && s < n {
				rw.counts[s]++
			}
			store.Spread(store.Since(t, w, rw.last), t, r.From, r.To, step, func(s, ns int64) { rw.cpuNs[s] += ns })
			rw.last = t
		}
		return nil
	})
	if err != nil {
		return nil, warnings, err
	}
	p := &PerCPU{Start: seconds(r.From), Step: float64(step) / 1e9, CPUs: make([]uint32, 0, len(rows)), Nodes: make([]string, 0, len(rows)),
		Counts: make([][]int, 0, len(rows)), Unit: UnitCPUSeconds, CPU: make([][]float64, 0, len(rows))}
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b nodeCPU) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.cpu, b.cpu)) })
	for _, key := range keys {
		p.CPUs = append(p.CPUs, key.cpu)
		p.Nodes = append(p.Nodes, key.node)
		rw := rows[key]
		p.Counts = append(p.Counts, rw.counts)
		secs := make([]float64, steps)
		for i, ns := range rw.cpuNs {
			secs[i] = seconds(ns)
		}
		p.CPU = append(p.CPU, secs)
	}
	return p, warnings, nil
}
