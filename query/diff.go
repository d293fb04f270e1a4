package query

import (
	"context"
	"math"

	"github.com/heatscope/heatscope/store"
)

// DiffNode is a node of a differential flame graph: the samples through it
// in range A (the selection) and in range B (the baseline).
type DiffNode struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// A and B count samples at or above this node in each range; SelfA
	// and SelfB those ending here.
	A     int64 `json:"a"`
	B     int64 `json:"b"`
	SelfA int64 `json:"selfA"`
	SelfB int64 `json:"selfB"`
	// Delta is the normalised difference of self counts:
	// SelfA - round(SelfB * weight), where weight is TotalA/TotalB by
	// default (FlameScope's), so ranges of different lengths or load
	// compare fairly, or the ratio of the ranges' lengths (ByLength).
	// Positive: more in A.
	Delta int64 `json:"delta"`
	// DeltaTotal is the same for the whole subtree: A - round(B * weight).
	DeltaTotal int64       `json:"deltaTotal"`
	Children   []*DiffNode `json:"children,omitempty"`
}

// Diff is a differential flame graph and the totals it was normalised by.
type Diff struct {
	TotalA int64     `json:"totalA"`
	TotalB int64     `json:"totalB"`
	Root   *DiffNode `json:"root"`
}

// Normalization says how B's counts are scaled before they are compared
// with A's.
type Normalization int

const (
	// ByTotals scales B by TotalA/TotalB, as FlameScope does: each frame's
	// share of its window is compared, whatever the windows' load.
	ByTotals Normalization = iota
	// ByLength scales B by the ratio of the windows' lengths: samples per
	// second are compared, so a burst in A shows as growth everywhere it
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

// DiffOf compares the samples in a with those in b (both passing f),
// scaling B as norm says, unresolved frames named as fr says. The tree is
// the union of both ranges' trees, so frames that vanished show too.
func DiffOf(ctx context.Context, db *store.DB, a, b store.Range, f *store.Filter, norm Normalization, fr Frames) (*Diff, store.Warnings, error) {
	ta, warnings, err := GroupedFlameGraphOf(ctx, db, a, f, GroupNone, fr)
	if err != nil {
		return nil, warnings, err
	}
	tb, w2, err := GroupedFlameGraphOf(ctx, db, b, f, GroupNone, fr)
	warnings = append(warnings, w2...)
	if err != nil {
		return nil, warnings, err
	}
	d := &Diff{TotalA: ta.Value, TotalB: tb.Value}
	weight := 0.0
	switch {
	case norm == ByLength && b.To > b.From:
		weight = float64(a.To-a.From) / float64(b.To-b.From)
	case norm == ByTotals && tb.Value > 0:
		weight = float64(ta.Value) / float64(tb.Value)
	}
	d.Root = mergeDiff(ta, tb, weight)
	return d, warnings, nil
}

func mergeDiff(a, b *Node, weight float64) *DiffNode {
	var d *DiffNode
	switch {
	case a != nil:
		d = &DiffNode{Name: a.Name, Kind: a.Kind, A: a.Value, SelfA: a.Self}
	default:
		d = &DiffNode{Name: b.Name, Kind: b.Kind}
	}
	if b != nil {
		d.B, d.SelfB = b.Value, b.Self
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
