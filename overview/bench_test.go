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

// BenchmarkBrowse measures a node's day (16 CPUs, one imported block)
// browsed in turn in the node view (a timeline of every thread) and the
// fleet overview, each at the step the UI asks for its width (1440 and
// 362 columns), over the day, six hours and an hour, twice: with the
// store's timelines keeping their per-CPU steps in the overview's cells
// (Reader.KeepStepsIn: one budget, "shared") or in the store's own cache
// ("own", two bounds). It reports the summaries read per session
// (reads/op).
func BenchmarkBrowse(b *testing.B) {
	start := time.Now().Add(-30 * time.Hour).Truncate(time.Hour).UnixNano()
	dir, _ := storetest.ImportDir(b, synth.Config{CPUs: 16, Hz: 1, Start: start, Seconds: 24 * 3600})
	const hour = int64(time.Hour)
	day := store.Range{From: start, To: start + 24*hour}
	six := store.Range{From: start + 6*hour, To: start + 12*hour}
	one := store.Range{From: start + 7*hour, To: start + 8*hour}
	ctx := context.Background()
	for _, name := range []string{"own", "shared"} {
		b.Run(name, func(b *testing.B) {
			var reads uint64
			defer benchcpu.PerOp(b)()
			for range b.N {
				b.StopTimer()
				rd := storetest.OpenDirs(b, dir)
				cells := NewCells(0, 0)
				if name == "shared" {
					rd.KeepStepsIn(cells.Timelines())
				}
				before := rd.Stats().CPUSummaryReads
				b.StartTimer()
				for range 2 {
					for _, r := range []store.Range{day, six, one} {
						if _, _, err := rd.Timeline(ctx, r, Step(r, 1440), &store.Filter{}); err != nil {
							b.Fatal(err)
						}
						step := Step(r, 362)
						if _, _, err := Build(ctx, rd, cells, Request{Range: Align(r, step), Step: step, Filter: &store.Filter{}}); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				reads = rd.Stats().CPUSummaryReads - before
				rd.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(reads), "reads/op")
		})
	}
}
