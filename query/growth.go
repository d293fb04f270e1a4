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
	// Via, when set, makes the function a pass-through: its call to Via
	// (of kind ViaKind) grew by DeltaVia, at least PassThroughShare of
	// DeltaTotal, so the function's row says little that Via's does not
	// (entry_SYSCALL_64 calling do_syscall_64, a goroutine's main calling
	// the one function that does the work).
	Via      string `json:"via,omitempty"`
	ViaKind  string `json:"viaKind,omitempty"`
	DeltaVia int64  `json:"deltaVia,omitempty"`
}

// PassThroughShare is the share of a function's growth one call must
// carry for the function to be a pass-through (Growth.Via). 90%: what is
// left, the function's own code and its other callees, is then at most
// the tenth the sampling noise of a hundred-sample growth (√100) amounts
// to.
const PassThroughShare = 0.9

// Growths is the top-functions table of A against B.
type Growths struct {
	// Samples and Samples2 are the samples in A and in B.
	Samples   int64    `json:"samples"`
	Samples2  int64    `json:"samples2"`
	Functions []Growth `json:"functions"`
}

// GrowthOrder is what GrowthOf sorts the functions by.
type GrowthOrder int

const (
	// ByTotal sorts by the growth of total samples (the function and
	// what it calls), then of self samples.
	ByTotal GrowthOrder = iota
	// BySelf sorts by the growth of self samples (the function's own
	// code), then of total samples.
	BySelf
)

// ParseGrowthOrder reads the order parameter: "total" (or empty) or
// "self".
func ParseGrowthOrder(v string) (GrowthOrder, error) {
	switch v {
	case "", "total":
		return ByTotal, nil
	case "self":
		return BySelf, nil
	}
	return ByTotal, paramErr("order", "%q: want total or self", v)
}

// GrowthOf compares every function's samples in a with those in b (both
// passing f), biggest growth first (by order), then by name, and marks
// the pass-throughs (Growth.Via). Unresolved frames are named as fr says.
//
// Unlike DiffOf, which scales B by the ratio of the ranges' sample totals
// (how each function's share changed), GrowthOf scales B by the ratio of
// the ranges' lengths: a burst of CPU shows as growth even though it
// raises A's total. For the two equal windows around an event the scale is
// 1 and the deltas are plain differences.
func GrowthOf(ctx context.Context, db *store.DB, a, b store.Range, f *store.Filter, order GrowthOrder, fr Frames) (*Growths, store.Warnings, error) {
	edgesA, edgesB := map[callEdge]int64{}, map[callEdge]int64{}
	ta, warnings, err := countFunctions(ctx, db, a, f, GroupNone, fr, edgesA)
	if err != nil {
		return nil, warnings, err
	}
	tb, w2, err := countFunctions(ctx, db, b, f, GroupNone, fr, edgesB)
	warnings = append(warnings, w2...)
	if err != nil {
		return nil, warnings, err
	}
	scale := float64(a.To-a.From) / float64(b.To-b.From)
	delta := func(a, b int64) int64 { return a - int64(math.Round(float64(b)*scale)) }
	index := map[funcKey]int{}
	g := &Growths{Samples: ta.Samples, Samples2: tb.Samples, Functions: []Growth{}}
	for _, fn := range ta.Functions {
		index[funcKey{name: fn.Name, kind: fn.Kind}] = len(g.Functions)
		g.Functions = append(g.Functions, Growth{Name: fn.Name, Kind: fn.Kind, Self: fn.Self, Total: fn.Total})
	}
	for _, fn := range tb.Functions {
		i, ok := index[funcKey{name: fn.Name, kind: fn.Kind}]
		if !ok {
			i = len(g.Functions)
			index[funcKey{name: fn.Name, kind: fn.Kind}] = i
			g.Functions = append(g.Functions, Growth{Name: fn.Name, Kind: fn.Kind})
		}
		g.Functions[i].Self2, g.Functions[i].Total2 = fn.Self, fn.Total
	}
	for i := range g.Functions {
		fn := &g.Functions[i]
		fn.DeltaSelf = delta(fn.Self, fn.Self2)
		fn.DeltaTotal = delta(fn.Total, fn.Total2)
	}
	// A function's biggest growing call, among the calls seen in A or B.
	for e, n := range edgesA {
		g.via(index[e.caller], e.callee, delta(n, edgesB[e]))
	}
	for e, n := range edgesB {
		if _, ok := edgesA[e]; !ok {
			g.via(index[e.caller], e.callee, delta(0, n))
		}
	}
	for i := range g.Functions {
		fn := &g.Functions[i]
		if fn.DeltaTotal <= 0 || float64(fn.DeltaVia) < PassThroughShare*float64(fn.DeltaTotal) {
			fn.Via, fn.ViaKind, fn.DeltaVia = "", "", 0
		}
	}
	slices.SortFunc(g.Functions, func(x, y Growth) int {
		if order == BySelf {
			return cmp.Or(cmp.Compare(y.DeltaSelf, x.DeltaSelf), cmp.Compare(y.DeltaTotal, x.DeltaTotal), cmp.Compare(x.Name, y.Name), cmp.Compare(x.Kind, y.Kind))
		}
		return cmp.Or(cmp.Compare(y.DeltaTotal, x.DeltaTotal), cmp.Compare(y.DeltaSelf, x.DeltaSelf), cmp.Compare(x.Name, y.Name), cmp.Compare(x.Kind, y.Kind))
	})
	return g, warnings, nil
}

// via records that function i's call to callee grew by d, keeping the
// biggest growth (ties to the first name, for a stable answer).
func (g *Growths) via(i int, callee funcKey, d int64) {
	fn := &g.Functions[i]
	if d <= 0 || d < fn.DeltaVia || d == fn.DeltaVia && fn.Via != "" && cmp.Or(cmp.Compare(callee.name, fn.Via), cmp.Compare(callee.kind, fn.ViaKind)) > 0 {
		return
	}
	fn.Via, fn.ViaKind, fn.DeltaVia = callee.name, callee.kind, d
}
