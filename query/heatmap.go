package query

import (
	"context"
	"fmt"
	"math"

	"github.com/heatscope/heatscope/store"
)

// Heatmap is FlameScope's subsecond heatmap: one column per second of the
// range, one row per 1000/rows ms slice of the second, row 0 the highest
// offset (drawn at the top), each cell the number of samples in it.
type Heatmap struct {
	// Start is the Unix time (seconds) of column 0: the range's start
	// rounded down to a whole second.
	Start float64 `json:"start"`
	// Columns numbers the columns: 0, 1, ... (seconds since Start).
	Columns []int `json:"columns"`
	// Rows gives each row's offset within the second in milliseconds,
	// highest first.
	Rows []float64 `json:"rows"`
	// Values holds the counts, Values[column][row].
	Values [][]int `json:"values"`
	// MaxValue is the largest count.
	MaxValue int `json:"maxvalue"`
}

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
// parses from the text.
func HeatmapOf(ctx context.Context, db *store.DB, r store.Range, f *store.Filter, rows int) (*Heatmap, store.Warnings, error) {
	if rows < 1 || rows > MaxRows {
		return nil, nil, fmt.Errorf("heatmap: %d rows, want 1 to %d", rows, MaxRows)
	}
	start := math.Floor(seconds(r.From))
	cols := int(math.Ceil(seconds(r.To)) - start)
	if cols < 1 || cols > MaxColumns {
		return nil, nil, fmt.Errorf("heatmap: %d columns (one per second), want 1 to %d", cols, MaxColumns)
	}
	h := &Heatmap{Start: start, Columns: make([]int, cols), Rows: make([]float64, rows), Values: make([][]int, cols)}
	for i := range rows {
		h.Rows[rows-1-i] = 1000 * float64(i) / float64(rows)
	}
	cells := make([]int, cols*rows)
	for c := range cols {
		h.Columns[c] = c
		h.Values[c] = cells[c*rows : (c+1)*rows : (c+1)*rows]
	}
	fr := float64(rows)
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		for _, i := range b.Rows {
			t := seconds(b.T.Time[i])
			col := int(math.Floor(t - start))
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
	return h, warnings, nil
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }
