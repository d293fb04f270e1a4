package query

import (
	"cmp"
	"context"
	"slices"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Node is a flame graph node: a function (or, under the root, a command)
// and the samples whose stacks pass through it.
type Node struct {
	Name string `json:"name"`
	// Kind is "kernel", "user", "jit", "python" or "unknown" for frames, "process"
	// for the command level, "group" for the container, pod, namespace,
	// QoS or cgroup level above it (when grouped) and "root" for the root.
	Kind string `json:"kind"`
	// Value counts samples at or above this node; Self those ending here.
	Value int64 `json:"value"`
	Self  int64 `json:"self"`
	// CPU is the CPU time, in seconds, of the samples at or above this
	// node, each weighing its own sampling period; SelfCPU that of those
	// ending here. Across a change of the sampling rate they, not the
	// counts, are what the node cost.
	CPU     float64 `json:"cpu"`
	SelfCPU float64 `json:"selfCpu"`
	// FP counts the samples at or above this node whose frame here was
	// found with frame pointers in a walk with unwind tables
	// (sample.MethodFP): 0 when none was or the method is not known.
	// A frame reached both ways is one node.
	FP int64 `json:"fp,omitempty"`
	// Children are sorted by name.
	Children []*Node `json:"children,omitempty"`

	cpuNs, selfNs int64 // CPU and SelfCPU in nanoseconds, exact
}

// kindProcess, kindRoot and kindGroup extend sample.Kind for the tree's
// top levels, above every frame kind (sample.Kind.Valid).
const (
	kindProcess = sample.Kind(0x80) + iota
	kindRoot
	kindGroup
)

func kindString(k sample.Kind) string {
	switch k {
	case kindProcess:
		return "process"
	case kindRoot:
		return "root"
	case kindGroup:
		return "group"
	}
	return k.String()
}

// treeBuilder collects each distinct path (command, then frames root
// first) as a sequence of interned (name, kind) ids with its sample count,
// then builds the tree in one pass over the sorted paths: a path shares its
// prefix with the previous one, so no node lookup is ever needed. This
// replaced a map from (parent, name) to child, which spent 70% of a 10 s
// flame graph's time (236k nodes) growing that map.
type treeBuilder struct {
	group  Group
	frames Frames
	ids    map[string]uint32 // name + kind byte -> id
	names  []string
	kinds  []sample.Kind
	data   []uint32 // all paths' ids, back to back
	// fpAt holds, for each path, the depths (indices into its ids) of
	// its frames found with frame pointers, back to back.
	fpAt  []int32
	paths []path
	key   []byte
}

type path struct {
	off, n     int32
	fpOff, fpN int32 // its depths in fpAt
	count      int64
	cpuNs      int64 // count times the batch's period
}

func newTreeBuilder(g Group, fr Frames) *treeBuilder {
	return &treeBuilder{group: g, frames: fr, ids: map[string]uint32{}}
}

func (tb *treeBuilder) id(name string, kind sample.Kind) uint32 {
	tb.key = append(append(tb.key[:0], name...), byte(kind))
	if id, ok := tb.ids[string(tb.key)]; ok {
		return id
	}
	id := uint32(len(tb.names))
	tb.names = append(tb.names, name)
	tb.kinds = append(tb.kinds, kind)
	tb.ids[string(tb.key)] = id
	return id
}

// add adds a batch's samples, one path per distinct (group, command,
// stack).
func (tb *treeBuilder) add(b *store.Batch) {
	t := b.T
	type key struct{ meta, comm, stack uint32 }
	counts := map[key]int64{}
	for _, i := range b.Rows {
		th := t.Threads[t.Thread[i]]
		k := key{comm: th.Comm, stack: t.Stack[i]}
		if tb.group != GroupNone {
			k.meta = th.Meta
		}
		counts[k]++
	}
	frameID := make([]int64, len(t.Frames)) // id + 1, 0 not known yet
	w := b.Weight()
	for k, n := range counts {
		off := len(tb.data)
		if tb.group != GroupNone {
			tb.data = append(tb.data, tb.id(tb.group.label(t, k.meta), kindGroup))
		}
		tb.data = append(tb.data, tb.id(t.Strings[k.comm], kindProcess))
		fpOff := len(tb.fpAt)
		frames := t.StackOf(k.stack)
		for j := len(frames) - 1; j >= 0; j-- { // root first
			id := frames[j]
			if b.KeepFrame != nil && !b.KeepFrame[id] {
				continue
			}
			if frameID[id] == 0 {
				frameID[id] = int64(tb.id(tb.frames.FrameName(t, id), t.Frames[id].Kind)) + 1
			}
			if t.Frames[id].Method == sample.MethodFP {
				tb.fpAt = append(tb.fpAt, int32(len(tb.data)-off))
			}
			tb.data = append(tb.data, uint32(frameID[id]-1))
		}
		tb.paths = append(tb.paths, path{off: int32(off), n: int32(len(tb.data) - off),
			fpOff: int32(fpOff), fpN: int32(len(tb.fpAt) - fpOff), count: n, cpuNs: n * w})
	}
}

func (tb *treeBuilder) pathIDs(p path) []uint32 { return tb.data[p.off : p.off+p.n] }

// tree builds the nested tree, children sorted by name.
func (tb *treeBuilder) tree() *Node {
	slices.SortFunc(tb.paths, func(a, b path) int { return slices.Compare(tb.pathIDs(a), tb.pathIDs(b)) })
	type flat struct {
		id            uint32
		parent        int32
		value, self   int64
		cpuNs, selfNs int64
		fp            int64
	}
	nodes := []flat{{parent: -1}}
	var cur []int32 // node of each depth of the previous path
	var prev []uint32
	for _, p := range tb.paths {
		ids := tb.pathIDs(p)
		common := 0
		for common < len(ids) && common < len(prev) && ids[common] == prev[common] {
			common++
		}
		cur = cur[:common]
		for d := common; d < len(ids); d++ {
			parent := int32(0)
			if d > 0 {
				parent = cur[d-1]
			}
			cur = append(cur, int32(len(nodes)))
			nodes = append(nodes, flat{id: ids[d], parent: parent})
		}
		nodes[0].value += p.count
		nodes[0].cpuNs += p.cpuNs
		for _, n := range cur {
			nodes[n].value += p.count
			nodes[n].cpuNs += p.cpuNs
		}
		leaf := 0
		if len(cur) > 0 {
			leaf = int(cur[len(cur)-1])
		}
		nodes[leaf].self += p.count
		nodes[leaf].selfNs += p.cpuNs
		for _, d := range tb.fpAt[p.fpOff : p.fpOff+p.fpN] {
			nodes[cur[d]].fp += p.count
		}
		prev = ids
	}

	out := make([]Node, len(nodes))
	nchild := make([]int32, len(nodes))
	for i, fn := range nodes {
		out[i] = Node{Value: fn.value, Self: fn.self, CPU: seconds(fn.cpuNs), SelfCPU: seconds(fn.selfNs), FP: fn.fp,
			cpuNs: fn.cpuNs, selfNs: fn.selfNs}
		if i == 0 {
			out[i].Name, out[i].Kind = "root", kindString(kindRoot)
		} else {
			out[i].Name, out[i].Kind = tb.names[fn.id], kindString(tb.kinds[fn.id])
			nchild[fn.parent]++
		}
	}
	backing := make([]*Node, len(nodes))
	next := 0
	for i := range out {
		if nchild[i] > 0 {
			out[i].Children = backing[next : next : next+int(nchild[i])]
			next += int(nchild[i])
		}
	}
	for i := 1; i < len(out); i++ {
		p := &out[nodes[i].parent]
		p.Children = append(p.Children, &out[i])
	}
	for i := range out {
		if len(out[i].Children) > 1 {
			slices.SortFunc(out[i].Children, func(a, b *Node) int {
				return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind))
			})
		}
	}
	return &out[0]
}

// FlameGraphOf builds the flame graph of the samples in r that pass f,
// unresolved frames grouped per module. As in FlameScope, the first level
// under the root is the command.
func FlameGraphOf(ctx context.Context, db Selector, r store.Range, f *store.Filter) (*Node, store.Warnings, error) {
	return GroupedFlameGraphOf(ctx, db, r, f, GroupNone, GroupAddresses)
}

// GroupedFlameGraphOf is FlameGraphOf with a level of groups (containers,
// pods, ...) between the root and the commands (GroupNone leaves it out),
// unresolved frames named as fr says.
func GroupedFlameGraphOf(ctx context.Context, db Selector, r store.Range, f *store.Filter, g Group, fr Frames) (*Node, store.Warnings, error) {
	tb := newTreeBuilder(g, fr)
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		tb.add(b)
		return nil
	})
	if err != nil {
		return nil, warnings, err
	}
	return tb.tree(), warnings, nil
}
