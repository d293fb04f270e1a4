package query

import (
	"context"
	"math"

	"github.com/heatscope/heatscope/store"
)

// DiffNode is a node of a differential flame graph: the CPU time through
// it in range A (the selection) and in range B (the baseline). Every
// figure is CPU time in nanoseconds, each sample weighing its own sampling
// period, so that a change of the sampling rate between (or within) the
// ranges is no change of the frame. The web package encodes it (in
// seconds, or nanoseconds in its compact form).
type DiffNode struct {
	Name string
	Kind string
	// A and B are the CPU time of the samples at or above this node in
	// each range; SelfA and SelfB that of those ending here.
	A     int64
	B     int64
	SelfA int64
	SelfB int64
	// Delta is the normalised difference of self CPU time:
	// SelfA - round(SelfB * weight), where weight is TotalA/TotalB by
	// default (FlameScope's), so ranges of different lengths or load
	// compare fairly, or the ratio of the ranges' lengths (ByLength).
	// Positive: more in A.
	Delta int64
	// DeltaTotal is the same for the whole subtree: A - round(B * weight).
	DeltaTotal int64
	Children   []*DiffNode
}

// Diff is a differential flame graph and the totals it was normalised by.
type Diff struct {
	// TotalA and TotalB are the CPU time, in nanoseconds, of each range's
	// samples; SamplesA and SamplesB count them.
	TotalA   int64
	TotalB   int64
	SamplesA int64
	SamplesB int64
	Root     *DiffNode
}

// Normalization says how B's counts are scaled before they are compared
// with A's.
type Normalization int

const (
	// ByTotals scales B by TotalA/TotalB (CPU time), as FlameScope does
	// (with sample counts): each frame's share of its window is compared,
	// whatever the windows' load.
	ByTotals Normalization = iota
	// ByLength scales B by the ratio of the windows' lengths: CPU time
	// per second is compared, so a burst in A shows as growth everywhere it
	// ran even though it also raised A's total. This is the comparison of
	// "the seconds before an event" with "the seconds before those".
	ByLength
)

// ParseNormalization parses the normalize parameter: "total" (or empty)
// or "length".
func ParseNormalization(v string) (Normalization, error) {
	switch v {
	case "", "total":
		return ByTotals, nil
	case "length":
		return ByLength, nil
	}
	return ByTotals, paramErr("normalize", "%q: want total or length", v)
}

// DiffOf compares the CPU time of the samples in a with that of those in
// b (both passing f), each sample weighing its own period, scaling B as
// norm says, unresolved frames named as fr says. The tree is
// the union of both ranges' trees, so frames that vanished show too.
func DiffOf(ctx context.Context, db Selector, a, b store.Range, f *store.Filter, norm Normalization, fr Frames) (*Diff, store.Warnings, error) {
	ta, warnings, err := GroupedFlameGraphOf(ctx, db, a, f, GroupNone, fr)
	if err != nil {
		return nil, warnings, err
	}
	tb, w2, err := GroupedFlameGraphOf(ctx, db, b, f, GroupNone, fr)
	warnings = append(warnings, w2...)
	if err != nil {
		return nil, warnings, err
	}
	d := &Diff{TotalA: ta.cpuNs, TotalB: tb.cpuNs, SamplesA: ta.Value, SamplesB: tb.Value}
	weight := 0.0
	switch {
	case norm == ByLength && b.To > b.From:
		weight = float64(a.To-a.From) / float64(b.To-b.From)
	case norm == ByTotals && tb.cpuNs > 0:
		weight = float64(ta.cpuNs) / float64(tb.cpuNs)
	}
	d.Root = mergeDiff(ta, tb, weight)
	return d, warnings, nil
}

func mergeDiff(a, b *Node, weight float64) *DiffNode {
	var d *DiffNode
	switch {
	case a != nil:
		d = &DiffNode{Name: a.Name, Kind: a.Kind, A: a.cpuNs, SelfA: a.selfNs}
	default:
		d = &DiffNode{Name: b.Name, Kind: b.Kind}
	}
	if b != nil {
		d.B, d.SelfB = b.cpuNs, b.selfNs
	}
	d.Delta = d.SelfA - int64(math.Round(float64(d.SelfB)*weight))
	d.DeltaTotal = d.A - int64(math.Round(float64(d.B)*weight))
	// Children of both, in name order (both lists are sorted).
	var ac, bc []*Node
	if a != nil {
		ac = a.Children
	}
	if b != nil {
		bc = b.Children
	}
	i, j := 0, 0
	for i < len(ac) || j < len(bc) {
		switch {
		case j == len(bc) || i < len(ac) && less(ac[i], bc[j]):
			d.Children = append(d.Children, mergeDiff(ac[i], nil, weight))
			i++
		case i == len(ac) || less(bc[j], ac[i]):
			d.Children = append(d.Children, mergeDiff(nil, bc[j], weight))
			j++
		default:
			d.Children = append(d.Children, mergeDiff(ac[i], bc[j], weight))
			i++
			j++
		}
	}
	return d
}

func less(x, y *Node) bool {
	if x.Name != y.Name {
		return x.Name < y.Name
	}
	return x.Kind < y.Kind
}
