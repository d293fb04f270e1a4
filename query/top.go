package query

import (
	"cmp"
	"context"
	"slices"

	"github.com/heatscope/heatscope/store"
)

// Function is one row of the top-functions table.
type Function struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Self counts samples where the function is the leaf; Total those
	// where it is anywhere on the stack (once per sample).
	Self  int64 `json:"self"`
	Total int64 `json:"total"`
}

// Top is the top-functions table of a range.
type Top struct {
	// Samples is the number of samples the table covers.
	Samples   int64      `json:"samples"`
	Functions []Function `json:"functions"`
}

// TopOf counts every function's self and total samples in r (passing f),
// sorted by self count, then total, then name.
func TopOf(ctx context.Context, db *store.DB, r store.Range, f *store.Filter) (*Top, store.Warnings, error) {
	type key struct{ name, kind string }
	byFunc := map[key]*Function{}
	top := &Top{}
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		t := b.T
		perStack := map[uint32]int64{}
		for _, i := range b.Rows {
			perStack[t.Stack[i]]++
		}
		seen := map[key]bool{}
		for stack, n := range perStack {
			top.Samples += n
			clear(seen)
			leaf := true
			for _, id := range t.StackOf(stack) {
				if b.KeepFrame != nil && !b.KeepFrame[id] {
					continue
				}
				fr := t.Frames[id]
				k := key{t.Strings[fr.Function], fr.Kind.String()}
				fn := byFunc[k]
				if fn == nil {
					fn = &Function{Name: k.name, Kind: k.kind}
					byFunc[k] = fn
				}
				if leaf {
					fn.Self += n
					leaf = false
				}
				if !seen[k] {
					seen[k] = true
					fn.Total += n
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, warnings, err
	}
	for _, fn := range byFunc {
		top.Functions = append(top.Functions, *fn)
	}
	slices.SortFunc(top.Functions, func(a, b Function) int {
		return cmp.Or(cmp.Compare(b.Self, a.Self), cmp.Compare(b.Total, a.Total), cmp.Compare(a.Name, b.Name))
	})
	return top, warnings, nil
}
