package query

import (
	"context"
	"errors"
	"fmt"
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
	// CPUs lists the CPU numbers that have samples, ascending.
	CPUs []uint32 `json:"cpus"`
	// Counts holds the counts, Counts[cpu index][step index], the CPU
	// index being the position in CPUs. Step i covers
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

// PerCPUOf counts the samples in r that pass f per CPU and per step of
// step nanoseconds, from r.From, and sums the CPU time they stand for.
func PerCPUOf(ctx context.Context, db *store.DB, r store.Range, f *store.Filter, step int64) (*PerCPU, store.Warnings, error) {
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
	rows := map[uint32]*row{}
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		w := b.Weight()
		for _, i := range b.Rows {
			cpu := b.T.CPU[i]
			rw, ok := rows[cpu]
			if !ok {
				if len(rows) == MaxPerCPUs {
					return fmt.Errorf("per-CPU: %w: samples from more than %d CPUs", ErrTooManyCPUs, MaxPerCPUs)
				}
				rw = &row{counts: make([]int, steps), cpuNs: make([]int64, steps)}
				rows[cpu] = rw
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
	p := &PerCPU{Start: seconds(r.From), Step: float64(step) / 1e9, CPUs: make([]uint32, 0, len(rows)), Counts: make([][]int, 0, len(rows)),
		Unit: UnitCPUSeconds, CPU: make([][]float64, 0, len(rows))}
	for cpu := range rows {
		p.CPUs = append(p.CPUs, cpu)
	}
	slices.Sort(p.CPUs)
	for _, cpu := range p.CPUs {
		rw := rows[cpu]
		p.Counts = append(p.Counts, rw.counts)
		secs := make([]float64, steps)
		for i, ns := range rw.cpuNs {
			secs[i] = seconds(ns)
		}
		p.CPU = append(p.CPU, secs)
	}
	return p, warnings, nil
}
