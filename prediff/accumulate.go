package prediff

import (
	"cmp"
	"slices"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// kindProcess and kindRoot are the tree's top levels, as in the query
// package's flame graphs.
const (
	kindProcess = "process"
	kindRoot    = "root"
)

// accumulator sums the samples of every event's two windows: the tree
// over all events, each function's totals over all events, and, per
// event, each function's totals, to count the events it grew before.
type accumulator struct {
	frames     query.Frames
	wantTree   bool
	tab        bool
	focus      *Func
	ids        map[Func]uint32 // interned (name, kind)
	funcs      []Func
	nodes      []treeNode
	child      map[[2]uint32]int32 // (parent node, id) -> node
	sum        []funcSum           // by id
	grewOn     map[[2]uint32]bool  // (id, node id) it grew on
	nodeIDs    map[string]uint32
	evA, evB   []int64 // this event's totals, by id
	touched    []uint32
	seen       []uint32                // ids counted for the stack being added
	edges      map[[2]uint32]*[2]int64 // (caller, callee) -> CPU time in A and B
	seenEdges  [][2]uint32
	path       []uint32
	curA, curB int64
}

type treeNode struct {
	id                 uint32
	parent             int32
	a, b, selfA, selfB int64
}

type funcSum struct {
	a, b, selfA, selfB int64
	grew, ran, nodes   int
}

func newAccumulator(opts Options) *accumulator {
	return &accumulator{frames: opts.Frames, wantTree: opts.Tree, tab: opts.Table || opts.Focus != nil, focus: opts.Focus,
		ids: map[Func]uint32{}, child: map[[2]uint32]int32{}, nodes: []treeNode{{parent: -1}},
		grewOn: map[[2]uint32]bool{}, nodeIDs: map[string]uint32{}, edges: map[[2]uint32]*[2]int64{}}
}

func (a *accumulator) id(name, kind string) uint32 {
	k := Func{Name: name, Kind: kind}
	if id, ok := a.ids[k]; ok {
		return id
	}
	id := uint32(len(a.funcs))
	a.ids[k] = id
	a.funcs = append(a.funcs, k)
	a.sum = append(a.sum, funcSum{})
	a.evA = append(a.evA, 0)
	a.evB = append(a.evB, 0)
	return id
}

// begin starts an event.
func (a *accumulator) begin() { a.curA, a.curB = 0, 0 }

// add adds a batch of an event's samples: those at or after split are in
// window A, the others in B.
func (a *accumulator) add(b *store.Batch, split int64) {
	t := b.T
	if !a.wantTree && !a.tab {
		// Only the windows' totals: no stack is looked at.
		w := b.Weight()
		for _, i := range b.Rows {
			if t.Time[i] >= split {
				a.curA += w
			} else {
				a.curB += w
			}
		}
		return
	}
	type key struct {
		comm, stack uint32
		inA         bool
	}
	counts := map[key]int64{}
	for _, i := range b.Rows {
		counts[key{comm: t.Threads[t.Thread[i]].Comm, stack: t.Stack[i], inA: t.Time[i] >= split}]++
	}
	w := b.Weight()
	frameID := make([]int64, len(t.Frames)) // id + 1; 0: not interned yet
	for k, n := range counts {
		v := n * w
		if k.inA {
			a.curA += v
		} else {
			a.curB += v
		}
		a.path = a.path[:0] // leaf first
		for _, fid := range t.StackOf(k.stack) {
			if b.KeepFrame != nil && !b.KeepFrame[fid] {
				continue
			}
			if frameID[fid] == 0 {
				fr := t.Frames[fid]
				frameID[fid] = int64(a.id(a.frames.FrameName(t, fid), fr.Kind.String())) + 1
			}
			a.path = append(a.path, uint32(frameID[fid]-1))
		}
		if a.wantTree {
			a.addPath(a.id(t.Strings[k.comm], kindProcess), v, k.inA)
		}
		if a.tab {
			a.addFunctions(v, k.inA)
		}
	}
}

// addPath adds v to the tree along the command and a.path.
func (a *accumulator) addPath(proc uint32, v int64, inA bool) {
	add := func(n int32, self bool) {
		tn := &a.nodes[n]
		if inA {
			tn.a += v
			if self {
				tn.selfA += v
			}
		} else {
			tn.b += v
			if self {
				tn.selfB += v
			}
		}
	}
	add(0, false)
	n := a.childOf(0, proc)
	add(n, len(a.path) == 0)
	for j := len(a.path) - 1; j >= 0; j-- {
		n = a.childOf(n, a.path[j])
		add(n, j == 0)
	}
}

func (a *accumulator) childOf(parent int32, id uint32) int32 {
	k := [2]uint32{uint32(parent), id}
	if c, ok := a.child[k]; ok {
		return c
	}
	c := int32(len(a.nodes))
	a.nodes = append(a.nodes, treeNode{id: id, parent: parent})
	a.child[k] = c
	return c
}

// addFunctions adds v to this event's totals of every function on a.path
// (once each) and to the leaf's self time.
func (a *accumulator) addFunctions(v int64, inA bool) {
	if len(a.path) == 0 {
		return
	}
	if inA {
		a.sum[a.path[0]].selfA += v
	} else {
		a.sum[a.path[0]].selfB += v
	}
	a.seen = a.seen[:0]
	a.seenEdges = a.seenEdges[:0]
	for i, id := range a.path {
		// The call from this frame to the one below it, once per sample.
		if i > 0 && a.path[i-1] != id {
			e := [2]uint32{id, a.path[i-1]}
			if !slices.Contains(a.seenEdges, e) {
				a.seenEdges = append(a.seenEdges, e)
				t := a.edges[e]
				if t == nil {
					t = new([2]int64)
					a.edges[e] = t
				}
				if inA {
					t[0] += v
				} else {
					t[1] += v
				}
			}
		}
		if slices.Contains(a.seen, id) {
			continue
		}
		a.seen = append(a.seen, id)
		if a.evA[id] == 0 && a.evB[id] == 0 {
			a.touched = append(a.touched, id)
		}
		if inA {
			a.evA[id] += v
		} else {
			a.evB[id] += v
		}
	}
}

// end closes an event: its totals go into ev, and each function it saw
// counts it.
func (a *accumulator) end(ev *Event) {
	ev.A, ev.B = a.curA, a.curB
	node, ok := a.nodeIDs[ev.Node]
	if !ok {
		node = uint32(len(a.nodeIDs))
		a.nodeIDs[ev.Node] = node
	}
	focus, hasFocus := uint32(0), false
	if a.focus != nil {
		focus, hasFocus = a.ids[*a.focus]
	}
	for _, id := range a.touched {
		s := &a.sum[id]
		s.a += a.evA[id]
		s.b += a.evB[id]
		s.ran++
		if a.evA[id] > a.evB[id] {
			s.grew++
			if k := [2]uint32{id, node}; !a.grewOn[k] {
				a.grewOn[k] = true
				s.nodes++
			}
		}
		if hasFocus && id == focus {
			ev.FocusA, ev.FocusB = a.evA[id], a.evB[id]
		}
		a.evA[id], a.evB[id] = 0, 0
	}
	a.touched = a.touched[:0]
}

// functions returns every function seen, most grown first, the
// pass-throughs marked.
func (a *accumulator) functions() []Function {
	// Each function's most grown call (ties to the callee's smaller id,
	// for a stable answer).
	type call struct {
		callee uint32
		d      int64
	}
	best := map[uint32]call{}
	for e, t := range a.edges {
		d := t[0] - t[1]
		if b, ok := best[e[0]]; d > 0 && (!ok || d > b.d || d == b.d && e[1] < b.callee) {
			best[e[0]] = call{e[1], d}
		}
	}
	out := make([]Function, 0, len(a.funcs))
	for id, f := range a.funcs {
		s := a.sum[id]
		if f.Kind == kindProcess || s.ran == 0 {
			continue
		}
		fn := Function{Name: f.Name, Kind: f.Kind, A: s.a, B: s.b, SelfA: s.selfA, SelfB: s.selfB,
			Grew: s.grew, Ran: s.ran, GrewNodes: s.nodes}
		if c, ok := best[uint32(id)]; ok && s.a > s.b && float64(c.d) >= query.PassThroughShare*float64(s.a-s.b) {
			fn.Via, fn.ViaKind, fn.DeltaVia = a.funcs[c.callee].Name, a.funcs[c.callee].Kind, c.d
		}
		out = append(out, fn)
	}
	slices.SortFunc(out, func(x, y Function) int {
		return cmp.Or(cmp.Compare(y.A-y.B, x.A-x.B), cmp.Compare(y.Grew, x.Grew), cmp.Compare(y.SelfA-y.SelfB, x.SelfA-x.SelfB),
			cmp.Compare(x.Name, y.Name), cmp.Compare(x.Kind, y.Kind))
	})
	return out
}

// tree builds the nested tree, children by name then kind.
func (a *accumulator) tree() *TreeNode {
	out := make([]TreeNode, len(a.nodes))
	for i, n := range a.nodes {
		out[i] = TreeNode{A: n.a, B: n.b, SelfA: n.selfA, SelfB: n.selfB}
		if i == 0 {
			out[i].Name, out[i].Kind = kindRoot, kindRoot
		} else {
			out[i].Name, out[i].Kind = a.funcs[n.id].Name, a.funcs[n.id].Kind
		}
	}
	for i := 1; i < len(out); i++ {
		p := &out[a.nodes[i].parent]
		p.Children = append(p.Children, &out[i])
	}
	for i := range out {
		slices.SortFunc(out[i].Children, func(x, y *TreeNode) int {
			return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Kind, y.Kind))
		})
	}
	return &out[0]
}
