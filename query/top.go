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
	// Group is the container, pod, namespace, QoS class or cgroup of the
	// samples counted (TopOf with a Group); empty without one.
	Group string `json:"group,omitempty"`
	// Self counts samples where the function is the leaf; Total those
	// where it is anywhere on the stack (once per sample).
	Self  int64 `json:"self"`
	Total int64 `json:"total"`
	// SelfCPU and TotalCPU are the same samples' CPU time in seconds,
	// each sample weighing its own sampling period.
	SelfCPU  float64 `json:"selfCpu"`
	TotalCPU float64 `json:"totalCpu"`

	selfNs, totalNs int64
}

// Top is the top-functions table of a range, sorted by self CPU time.
type Top struct {
	// Samples is the number of samples the table covers.
	Samples int64 `json:"samples"`
	// CPU is their CPU time in seconds; Unit names it, "cpu-seconds".
	CPU       float64    `json:"cpu"`
	Unit      string     `json:"unit"`
	Functions []Function `json:"functions"`
}

// funcKey names a function: its name and kind, and its group when the
// table is grouped.
type funcKey struct{ name, kind, group string }

// callEdge is a call from one function to another.
type callEdge struct{ caller, callee funcKey }

// TopOf counts every function's self and total samples in r (passing f),
// sorted by self count, then total, then name. With a Group other than
// GroupNone a function has one row per group its samples fall in.
// Unresolved frames are named as fr says: grouped per module, a stripped
// binary is one row.
func TopOf(ctx context.Context, db Selector, r store.Range, f *store.Filter, g Group, fr Frames) (*Top, store.Warnings, error) {
	return countFunctions(ctx, db, r, f, g, fr, nil)
}

// countFunctions is TopOf; when edges is not nil it also sums, for every
// call from one function to another, the CPU time in nanoseconds of the
// samples whose stack holds that call (once per sample, like Total).
func countFunctions(ctx context.Context, db Selector, r store.Range, f *store.Filter, g Group, names Frames, edges map[callEdge]int64) (*Top, store.Warnings, error) {
	type key = funcKey
	index := map[key]int{}
	funcs := []Function{} // [] in JSON when no sample passes
	top := &Top{Unit: UnitCPUSeconds}
	var cpuNs int64
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		t := b.T
		w := b.Weight()
		type stackKey struct{ stack, meta uint32 }
		perStack := map[stackKey]int64{}
		for _, i := range b.Rows {
			k := stackKey{stack: t.Stack[i]}
			if g != GroupNone {
				k.meta = t.Threads[t.Thread[i]].Meta
			}
			perStack[k]++
		}
		// funcOf maps a frame to its row, index in funcs + 1 (0: not known
		// yet), for the group being counted.
		funcOfGroup := map[uint32][]int{}
		var seen []int         // funcs counted for this stack
		var seenEdges [][2]int // calls counted for this stack
		for sk, n := range perStack {
			top.Samples += n
			cpuNs += n * w
			seen = seen[:0]
			seenEdges = seenEdges[:0]
			leaf := true
			callee := -1 // the function called by the frame below, in funcs
			funcOf, ok := funcOfGroup[sk.meta]
			if !ok {
				funcOf = make([]int, len(t.Frames))
				funcOfGroup[sk.meta] = funcOf
			}
			group := ""
			if g != GroupNone {
				group = g.label(t, sk.meta)
			}
			for _, id := range t.StackOf(sk.stack) {
				if b.KeepFrame != nil && !b.KeepFrame[id] {
					continue
				}
				if funcOf[id] == 0 {
					fr := t.Frames[id]
					k := key{names.FrameName(t, id), fr.Kind.String(), group}
					fi, ok := index[k]
					if !ok {
						fi = len(funcs)
						funcs = append(funcs, Function{Name: k.name, Kind: k.kind, Group: group})
						index[k] = fi
					}
					funcOf[id] = fi + 1
				}
				fi := funcOf[id] - 1
				if leaf {
					funcs[fi].Self += n
					funcs[fi].selfNs += n * w
					leaf = false
				}
				if !slices.Contains(seen, fi) {
					seen = append(seen, fi)
					funcs[fi].Total += n
					funcs[fi].totalNs += n * w
				}
				if edges != nil && callee >= 0 && callee != fi && !slices.Contains(seenEdges, [2]int{fi, callee}) {
					seenEdges = append(seenEdges, [2]int{fi, callee})
					edges[callEdge{key{funcs[fi].Name, funcs[fi].Kind, group}, key{funcs[callee].Name, funcs[callee].Kind, group}}] += n * w
				}
				callee = fi
			}
		}
		return nil
	})
	if err != nil {
		return nil, warnings, err
	}
	top.CPU = seconds(cpuNs)
	for i := range funcs {
		funcs[i].SelfCPU, funcs[i].TotalCPU = seconds(funcs[i].selfNs), seconds(funcs[i].totalNs)
	}
	top.Functions = funcs
	slices.SortFunc(top.Functions, func(a, b Function) int {
		return cmp.Or(cmp.Compare(b.selfNs, a.selfNs), cmp.Compare(b.totalNs, a.totalNs), cmp.Compare(b.Self, a.Self),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.Group, b.Group))
	})
	return top, warnings, nil
}
