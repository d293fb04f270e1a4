package query

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/heatscope/heatscope/store"
)

// Heatmap is FlameScope's subsecond heatmap: one column per second of the
// range, one row per 1000/rows ms slice of the second, row 0 the highest
// offset (drawn at the top), each cell the CPU time of the samples in it
// and, as FlameScope gives it, their number.
type Heatmap struct {
	// Start is the Unix time (seconds) of column 0: the range's start
	// rounded down to a whole second.
	Start float64 `json:"start"`
	// Columns numbers the columns: 0, 1, ... (seconds since Start).
	Columns []int `json:"columns"`
	// Rows gives each row's offset within the second in milliseconds,
	// highest first.
	Rows []float64 `json:"rows"`
	// Values holds the sample counts, Values[column][row], as FlameScope
	// gives them. A count depends on the sampling rate: show CPU instead.
	Values [][]int `json:"values"`
	// MaxValue is the largest count.
	MaxValue int `json:"maxvalue"`
	// Unit names what CPU holds: "cpu-seconds".
	Unit string `json:"unit"`
	// CPU holds each cell's CPU time in seconds, CPU[column][row]: each
	// sample weighs its own sampling period, so a rate change leaves a
	// steady load's cells as they were, spread over that period before it
	// (as PerCPU's), so that a cell shorter than the period is never more
	// than busy.
	CPU [][]float64 `json:"cpu"`
	// MaxCPU is the largest cell's CPU time.
	MaxCPU float64 `json:"maxcpu"`
}

// UnitCPUSeconds names the unit of the views' CPU figures: CPU time in
// seconds (the share of one CPU over a step is the value over the step's
// length).
const UnitCPUSeconds = "cpu-seconds"

// MaxRows and MaxColumns bound a heatmap's size.
const (
	MaxRows    = 1000
	MaxColumns = 100_000
)

// HeatmapOf computes the heatmap of the samples in r that pass f.
//
// The arithmetic is FlameScope's, in float64 seconds, so that an imported
// perf script gives exactly the heatmap FlameScope gives for the same file:
// columns = ceil(end) - floor(start), a sample at t goes to column
// floor(t - floor(start)) and row rows - floor(rows*(t mod 1)) - 1. For
// perf's microsecond timestamps float64(ns)/1e9 is the same float Python
// parses from the text. An import placed at wall time was moved by whole
// seconds (Batch.ClockShift): its samples are placed on its own clock, t
// less the shift, whose floats are the file's (at wall time's magnitude a
// float has 2^-22 s steps, and a sample on a row's edge could fall on
// either side).
func HeatmapOf(ctx context.Context, db Selector, r store.Range, f *store.Filter, rows int) (*Heatmap, store.Warnings, error) {
	if rows < 1 || rows > MaxRows {
		return nil, nil, fmt.Errorf("heatmap: %d rows, want 1 to %d", rows, MaxRows)
	}
	start := math.Floor(seconds(r.From))
	cols := int(math.Ceil(seconds(r.To)) - start)
	if cols < 1 || cols > MaxColumns {
		return nil, nil, fmt.Errorf("heatmap: %d columns (one per second), want 1 to %d", cols, MaxColumns)
	}
	h := &Heatmap{Start: start, Columns: make([]int, cols), Rows: make([]float64, rows), Values: make([][]int, cols),
		Unit: UnitCPUSeconds, CPU: make([][]float64, cols)}
	for i := range rows {
		h.Rows[rows-1-i] = 1000 * float64(i) / float64(rows)
	}
	cells := make([]int, cols*rows)
	cpuNs := make([]int64, cols*rows)
	for c := range cols {
		h.Columns[c] = c
		h.Values[c] = cells[c*rows : (c+1)*rows : (c+1)*rows]
	}
	fr := float64(rows)
	startNs := int64(start) * int64(time.Second)
	sp := heatCells{cpuNs: cpuNs, start: int64(start), cols: cols, rows: int64(rows), from: max(r.From, startNs), to: r.To}
	var last store.LastSample // each CPU's last sample, for store.Since
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		w := b.Weight()
		// The batch's clock: start is a whole second on it too.
		shift := b.ClockShift
		origin := start - float64(shift/int64(time.Second))
		for _, i := range b.Rows {
			ns := b.T.Time[i]
			prev := last.Swap(b.T.CPU[i], ns)
			sp.add(store.Since(ns, w, prev), ns)
			t := seconds(ns - shift)
			col := int(math.Floor(t - origin))
			// t - floor(t) is exactly Python's t % 1 for t >= 1 (the
			// subtraction is exact), and far cheaper than math.Mod.
			row := rows - int(math.Floor(fr*(t-math.Floor(t)))) - 1
			if col >= 0 && col < cols && row >= 0 && row < rows {
				cells[col*rows+row]++
			}
		}
		return nil
	})
	if err != nil {
		return nil, warnings, err
	}
	for _, v := range cells {
		h.MaxValue = max(h.MaxValue, v)
	}
	cpu := make([]float64, len(cpuNs))
	for i, ns := range cpuNs {
		cpu[i] = seconds(ns)
		h.MaxCPU = max(h.MaxCPU, cpu[i])
	}
	for c := range cols {
		h.CPU[c] = cpu[c*rows : (c+1)*rows : (c+1)*rows]
	}
	return h, warnings, nil
}

// heatCells is store.Spread for the heatmap's cells: cpuNs, cols columns
// of rows slices from second start, the CPU time clipped to [from, to).
type heatCells struct {
	cpuNs    []int64
	start    int64 // Unix seconds
	cols     int
	rows     int64
	from, to int64
}

// add gives the CPU time a sample stands for, [lo, hi), to the slices it
// overlaps. Slice k (from the start of the second) of a second holds the
// offsets o (ns) with floor(o·rows/1e9) = k, as HeatmapOf places the
// samples; it is the row rows-1-k.
func (s *heatCells) add(lo, hi int64) {
	const second = int64(time.Second)
	n := s.rows
	lo, hi = max(lo, s.from), min(hi, s.to)
	for lo < hi {
		sec, o := lo/second, lo%second
		k := o * n / second
		end := min(hi, sec*second+((k+1)*second+n-1)/n) // the next slice's first offset
		if col := int(sec - s.start); col >= 0 && col < s.cols {
			s.cpuNs[int64(col)*n+n-1-k] += end - lo
		}
		lo = end
	}
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }
