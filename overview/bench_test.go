package overview

import (
	"context"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/benchcpu"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/store"
)

// BenchmarkBuild measures an overview of 10 minutes of 64 CPUs at 99 Hz
// (one node, imported blocks) from the blocks' per-CPU summaries: in 10
// columns from the steps a warming pass for 10 columns kept (warm), in 60
// columns (a step finer than the warm one: a zoom's steps, kept after the
// first).
func BenchmarkBuild(b *testing.B) {
	start := time.Now().Add(-time.Hour).Truncate(time.Hour).UnixNano()
	db, span := storetest.Imported(b, synth.Config{CPUs: 64, Hz: 99, Start: start, Seconds: 600}, store.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		columns int
	}{{"warm", 10}, {"zoom", 60}} {
		b.Run(c.name, func(b *testing.B) {
			cells := NewCells(0, 0)
			if _, err := Warm(ctx, db, cells, 10); err != nil {
				b.Fatal(err)
			}
			step := Step(span, c.columns)
			req := Request{Range: Align(span, step), Step: step, Filter: &store.Filter{}}
			defer benchcpu.PerOp(b)()
			for range b.N {
				if _, _, err := Build(ctx, db, cells, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
