package query

import (
	"cmp"
	"context"
	"slices"

	"github.com/heatscope/heatscope/store"
)

// Node is a flame graph node: a function (or, under the root, a command)
// and the samples whose stacks pass through it.
type Node struct {
	Name string `json:"name"`
	// Kind is "kernel", "user", "jit" or "unknown" for frames, "process"
	// for the command level and "root" for the root.
	Kind string `json:"kind"`
	// Value counts samples at or above this node; Self those ending here.
	Value int64 `json:"value"`
	Self  int64 `json:"self"`
	// Children are sorted by name.
	Children []*Node `json:"children,omitempty"`

	index map[nodeKey]*Node
}

type nodeKey struct{ name, kind string }

func newNode(name, kind string) *Node { return &Node{Name: name, Kind: kind} }

func (n *Node) child(name, kind string) *Node {
	k := nodeKey{name, kind}
	if c, ok := n.index[k]; ok {
		return c
	}
	if n.index == nil {
		n.index = map[nodeKey]*Node{}
	}
	c := newNode(name, kind)
	n.index[k] = c
	n.Children = append(n.Children, c)
	return c
}

// sortTree orders every node's children by name, as flame graphs are drawn.
func sortTree(n *Node) {
	slices.SortFunc(n.Children, func(a, b *Node) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind)) })
	for _, c := range n.Children {
		sortTree(c)
	}
}

// Count returns the number of nodes in the tree below and including n.
func (n *Node) Count() int {
	total := 1
	for _, c := range n.Children {
		total += c.Count()
	}
	return total
}

// stackCounts counts a batch's samples per (command, stack).
type stackKey struct {
	comm  uint32
	stack uint32
}

// FlameGraphOf builds the flame graph of the samples in r that pass f. As in
// FlameScope, the first level under the root is the command.
func FlameGraphOf(ctx context.Context, db *store.DB, r store.Range, f *store.Filter) (*Node, store.Warnings, error) {
	root := newNode("root", "root")
	warnings, err := db.Select(ctx, r, f, func(b *store.Batch) error {
		addBatch(root, b)
		return nil
	})
	if err != nil {
		return nil, warnings, err
	}
	sortTree(root)
	return root, warnings, nil
}

// addBatch adds a batch's samples to the tree, one path per distinct stack.
func addBatch(root *Node, b *store.Batch) {
	t := b.T
	counts := map[stackKey]int64{}
	for _, i := range b.Rows {
		counts[stackKey{t.Threads[t.Thread[i]].Comm, t.Stack[i]}]++
	}
	for k, n := range counts {
		node := root.child(t.Strings[k.comm], "process")
		node.Value += n
		frames := t.StackOf(k.stack)
		for j := len(frames) - 1; j >= 0; j-- { // root first
			id := frames[j]
			if b.KeepFrame != nil && !b.KeepFrame[id] {
				continue
			}
			fr := t.Frames[id]
			node = node.child(t.Strings[fr.Function], fr.Kind.String())
			node.Value += n
		}
		node.Self += n
		root.Value += n
	}
}
