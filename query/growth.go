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
	// Self2 and Total2 in B. They change with the sampling rate.
	Self   int64 `json:"self"`
	Total  int64 `json:"total"`
	Self2  int64 `json:"self2"`
	Total2 int64 `json:"total2"`
	// SelfCPU, TotalCPU, SelfCPU2 and TotalCPU2 are the same samples' CPU
	// time in seconds, each sample weighing its own sampling period.
	SelfCPU   float64 `json:"selfCpu"`
	TotalCPU  float64 `json:"totalCpu"`
	SelfCPU2  float64 `json:"selfCpu2"`
	TotalCPU2 float64 `json:"totalCpu2"`
	// DeltaSelfCPU and DeltaTotalCPU are A's CPU time minus B's scaled
	// to A's length (B × len(A)/len(B)), in seconds: how much more CPU
	// time the function took in A. Positive: it grew.
	DeltaSelfCPU  float64 `json:"deltaSelfCpu"`
	DeltaTotalCPU float64 `json:"deltaTotalCpu"`
	// Via, when set, makes the function a pass-through: its call to Via
	// (of kind ViaKind) grew by DeltaViaCPU seconds, at least
	// PassThroughShare of DeltaTotalCPU, so the function's row says
	// little that Via's does not (entry_SYSCALL_64 calling do_syscall_64,
	// a goroutine's main calling the one function that does the work).
	Via         string  `json:"via,omitempty"`
	ViaKind     string  `json:"viaKind,omitempty"`
	DeltaViaCPU float64 `json:"deltaViaCpu,omitempty"`

	// the deltas in nanoseconds, exact, which order and mark the rows
	deltaSelfNs, deltaTotalNs, deltaViaNs int64
}

// PassThroughShare is the share of a function's growth one call must
// carry for the function to be a pass-through (Growth.Via). 90%: what is
// left, the function's own code and its other callees, is then at most
// the tenth the sampling noise of a hundred-sample growth (√100) amounts
// to.
const PassThroughShare = 0.9

// Growths is the top-functions table of A against B.
type Growths struct {
	// Samples and Samples2 are the samples in A and in B; CPU and CPU2
	// their CPU time in seconds, which Unit names ("cpu-seconds").
	Samples   int64    `json:"samples"`
	Samples2  int64    `json:"samples2"`
	CPU       float64  `json:"cpu"`
	CPU2      float64  `json:"cpu2"`
	Unit      string   `json:"unit"`
	Functions []Growth `json:"functions"`
}

// GrowthOrder is what GrowthOf sorts the functions by.
type GrowthOrder int

const (
	// ByTotal sorts by the growth of total CPU time (the function and
	// what it calls), then of self CPU time.
	ByTotal GrowthOrder = iota
	// BySelf sorts by the growth of self CPU time (the function's own
	// code), then of total CPU time.
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

// GrowthOf compares every function's CPU time in a with that in b (both
// passing f), each sample weighing its own period, biggest growth first
// (by order), then by name, and marks the pass-throughs (Growth.Via).
// Unresolved frames are named as fr says.
//
// Unlike DiffOf, which by default scales B by the ratio of the ranges' CPU
// totals (how each function's share changed), GrowthOf scales B by the
// ratio of the ranges' lengths: a burst of CPU shows as growth even though
// it raises A's total. For the two equal windows around an event the scale
// is 1 and the deltas are plain differences.
func GrowthOf(ctx context.Context, db Selector, a, b store.Range, f *store.Filter, order GrowthOrder, fr Frames) (*Growths, store.Warnings, error) {
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
	g := &Growths{Samples: ta.Samples, Samples2: tb.Samples, CPU: ta.CPU, CPU2: tb.CPU, Unit: UnitCPUSeconds, Functions: []Growth{}}
	// the CPU time of each row's function in A and in B, in nanoseconds
	type cpu struct{ self, total, self2, total2 int64 }
	var ns []cpu
	for _, fn := range ta.Functions {
		index[funcKey{name: fn.Name, kind: fn.Kind}] = len(g.Functions)
		g.Functions = append(g.Functions, Growth{Name: fn.Name, Kind: fn.Kind, Self: fn.Self, Total: fn.Total, SelfCPU: fn.SelfCPU, TotalCPU: fn.TotalCPU})
		ns = append(ns, cpu{self: fn.selfNs, total: fn.totalNs})
	}
	for _, fn := range tb.Functions {
		i, ok := index[funcKey{name: fn.Name, kind: fn.Kind}]
		if !ok {
			i = len(g.Functions)
			index[funcKey{name: fn.Name, kind: fn.Kind}] = i
			g.Functions = append(g.Functions, Growth{Name: fn.Name, Kind: fn.Kind})
			ns = append(ns, cpu{})
		}
		g.Functions[i].Self2, g.Functions[i].Total2 = fn.Self, fn.Total
		g.Functions[i].SelfCPU2, g.Functions[i].TotalCPU2 = fn.SelfCPU, fn.TotalCPU
		ns[i].self2, ns[i].total2 = fn.selfNs, fn.totalNs
	}
	for i := range g.Functions {
		fn := &g.Functions[i]
		fn.deltaSelfNs = delta(ns[i].self, ns[i].self2)
		fn.deltaTotalNs = delta(ns[i].total, ns[i].total2)
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
		if fn.deltaTotalNs <= 0 || float64(fn.deltaViaNs) < PassThroughShare*float64(fn.deltaTotalNs) {
			fn.Via, fn.ViaKind, fn.deltaViaNs = "", "", 0
		}
		fn.DeltaSelfCPU, fn.DeltaTotalCPU, fn.DeltaViaCPU = seconds(fn.deltaSelfNs), seconds(fn.deltaTotalNs), seconds(fn.deltaViaNs)
	}
	slices.SortFunc(g.Functions, func(x, y Growth) int {
		if order == BySelf {
			return cmp.Or(cmp.Compare(y.deltaSelfNs, x.deltaSelfNs), cmp.Compare(y.deltaTotalNs, x.deltaTotalNs), cmp.Compare(x.Name, y.Name), cmp.Compare(x.Kind, y.Kind))
		}
		return cmp.Or(cmp.Compare(y.deltaTotalNs, x.deltaTotalNs), cmp.Compare(y.deltaSelfNs, x.deltaSelfNs), cmp.Compare(x.Name, y.Name), cmp.Compare(x.Kind, y.Kind))
	})
	return g, warnings, nil
}

// via records that function i's call to callee grew by d nanoseconds of
// CPU time, keeping the biggest growth (ties to the first name, for a
// stable answer).
func (g *Growths) via(i int, callee funcKey, d int64) {
	fn := &g.Functions[i]
	if d <= 0 || d < fn.deltaViaNs || d == fn.deltaViaNs && fn.Via != "" && cmp.Or(cmp.Compare(callee.name, fn.Via), cmp.Compare(callee.kind, fn.ViaKind)) > 0 {
		return
	}
	fn.Via, fn.ViaKind, fn.deltaViaNs = callee.name, callee.kind, d
}
