package query

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/heatscope/heatscope/store"
)

// Growth is one function's change between a range A and a baseline B.
type Growth struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Self and Total count the function's samples in A (as in Top);
	// Self2 and Total2 in B.
	Self   int64 `json:"self"`
	Total  int64 `json:"total"`
	Self2  int64 `json:"self2"`
	Total2 int64 `json:"total2"`
	// DeltaSelf and DeltaTotal are A's counts minus B's scaled to A's
	// length (B × len(A)/len(B)): how much more CPU time, in samples, the
	// function took in A. Positive: it grew.
	DeltaSelf  int64 `json:"deltaSelf"`
	DeltaTotal int64 `json:"deltaTotal"`
}

// Growths is the top-functions table of A against B.
type Growths struct {
	// Samples and Samples2 are the samples in A and in B.
	Samples   int64    `json:"samples"`
	Samples2  int64    `json:"samples2"`
	Functions []Growth `json:"functions"`
}

// GrowthOf compares every function's samples in a with those in b (both
// passing f), biggest growth of total samples first, then of self
// samples, then by name.
//
// Unlike DiffOf, which scales B by the ratio of the ranges' sample totals
// (how each function's share changed), GrowthOf scales B by the ratio of
// the ranges' lengths: a burst of CPU shows as growth even though it
// raises A's total. For the two equal windows around an event the scale is
// 1 and the deltas are plain differences.
func GrowthOf(ctx context.Context, db *store.DB, a, b store.Range, f *store.Filter) (*Growths, store.Warnings, error) {
	ta, warnings, err := TopOf(ctx, db, a, f)
	if err != nil {
		return nil, warnings, err
	}
	tb, w2, err := TopOf(ctx, db, b, f)
	warnings = append(warnings, w2...)
	if err != nil {
		return nil, warnings, err
	}
	scale := float64(a.To-a.From) / float64(b.To-b.From)
	type key struct{ name, kind string }
	index := map[key]int{}
	g := &Growths{Samples: ta.Samples, Samples2: tb.Samples}
	for _, fn := range ta.Functions {
		index[key{fn.Name, fn.Kind}] = len(g.Functions)
		g.Functions = append(g.Functions, Growth{Name: fn.Name, Kind: fn.Kind, Self: fn.Self, Total: fn.Total})
	}
	for _, fn := range tb.Functions {
		i, ok := index[key{fn.Name, fn.Kind}]
		if !ok {
			i = len(g.Functions)
			g.Functions = append(g.Functions, Growth{Name: fn.Name, Kind: fn.Kind})
		}
		g.Functions[i].Self2, g.Functions[i].Total2 = fn.Self, fn.Total
	}
	for i := range g.Functions {
		fn := &g.Functions[i]
		fn.DeltaSelf = fn.Self - int64(math.Round(float64(fn.Self2)*scale))
		fn.DeltaTotal = fn.Total - int64(math.Round(float64(fn.Total2)*scale))
	}
	slices.SortFunc(g.Functions, func(x, y Growth) int {
		return cmp.Or(cmp.Compare(y.DeltaTotal, x.DeltaTotal), cmp.Compare(y.DeltaSelf, x.DeltaSelf), cmp.Compare(x.Name, y.Name))
	})
	return g, warnings, nil
}
