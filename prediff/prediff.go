// Package prediff answers "what grew before the events, on every node that
// had them": for every event of one kind on every selected node, it
// compares the window before the event (A) with the window of the same
// length just before that (B), on that event's node, and sums both over
// all the events into one differential flame graph and one table of the
// functions that grew, each saying before how many of the events it grew.
//
// It reads events and samples through a Reader only (a store.Reader), so it answers the
// same over a data directory and over a fleet's bucket. Every figure is
// CPU time in nanoseconds: each sample weighs its own sampling period.
package prediff

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// Limits.
const (
	// MaxWindow is the longest window: an hour before an event, and the
	// hour before that.
	MaxWindow = int64(time.Hour)
	// DefaultMaxEvents is how many events Compare compares when
	// Options.MaxEvents is 0; MaxEvents the most it may be set to.
	DefaultMaxEvents = 1000
	MaxEvents        = 10_000
)

// Options say what Compare compares.
type Options struct {
	// Kind is the events' kind (events.Event.Kind: "ena-reset",
	// "cpu-saturation").
	Kind string
	// Window is the length of A and of B, in nanoseconds (1 ns to
	// MaxWindow).
	Window int64
	// Range holds the times of the events compared.
	Range store.Range
	// Filter selects the samples counted; its node parts (Nodes,
	// NodeRegex, NodeLabels) also choose whose events count.
	Filter store.Filter
	// Frames names unresolved frames.
	Frames query.Frames
	// MaxEvents bounds the events compared, the first ones in time
	// (DefaultMaxEvents when 0); Result.More says others were left out.
	MaxEvents int
	// Focus, when set, is a function whose A and B are reported per event
	// and per node.
	Focus *Func
	// Tree builds Result.Root, the differential flame graph; Table builds
	// Result.Functions.
	Tree, Table bool
}

// Func names a function: its name and kind ("kernel", "user", "jit",
// "python", "unknown"), as the table names it (a Python function
// "qualname (file)").
type Func struct{ Name, Kind string }

// Event is one event compared, and the CPU time of its node's samples
// (those the filter keeps) in its two windows.
type Event struct {
	Node   string
	Time   int64 // Unix ns
	Source string
	Text   string
	// A and B are the CPU time in the window before the event and in the
	// one before that, ns.
	A, B int64
	// FocusA and FocusB are Options.Focus's total (inclusive) CPU time
	// in each window.
	FocusA, FocusB int64
}

// NodeSum is one node's events, summed.
type NodeSum struct {
	Node string
	// Events counts its events compared, WithSamples those with a sample
	// in either window.
	Events, WithSamples int
	A, B                int64
	FocusA, FocusB      int64
	// FocusGrew counts the events before which the focus function grew.
	FocusGrew int
}

// Function is one row of the functions table: a function's CPU time in
// all A windows and all B windows.
type Function struct {
	Name, Kind string
	// A and B count every sample with the function anywhere on its stack
	// (once per sample); SelfA and SelfB those where it is the leaf.
	A, B, SelfA, SelfB int64
	// Grew counts the events before which its total grew (A > B on that
	// event's node), Ran those where it ran in either window.
	Grew, Ran int
	// GrewNodes counts the nodes with at least one event it grew before.
	GrewNodes int
	// Via, when set, makes the function a pass-through, as in the query
	// package's growth table: its call to Via (of kind ViaKind) grew by
	// DeltaVia, at least query.PassThroughShare of its own growth, so its
	// row says little that Via's does not.
	Via, ViaKind string
	DeltaVia     int64
}

// TreeNode is a node of the summed differential flame graph: under the
// root the commands, then the frames, root first. A and B count CPU time
// at or above the node, SelfA and SelfB the time ending at it, ns. The
// windows are of equal length, so A - B is the change.
type TreeNode struct {
	Name, Kind         string
	A, B, SelfA, SelfB int64
	Children           []*TreeNode // by name, then kind
}

// Result is what Compare found.
type Result struct {
	// Events are the events compared, in time order.
	Events []Event
	// More is true when MaxEvents left events out.
	More bool
	// WithSamples counts the events with a sample in either window.
	WithSamples int
	// Nodes are the nodes whose events were compared, by name.
	Nodes []NodeSum
	// A and B are the CPU time of all A windows and all B windows, ns.
	A, B int64
	// Functions (with Options.Table) are every function seen, most grown
	// (A - B) first.
	Functions []Function
	// Root (with Options.Tree) is the differential flame graph.
	Root *TreeNode
	// Kinds, when no event matched, counts the kinds of event the
	// selected nodes do have in the range, so the answer can say so.
	Kinds map[string]int
}

// Compare compares, for every event of opts.Kind in opts.Range on the
// nodes opts.Filter selects, the window before it with the window before
// that, on its own node, and sums both over the events. No event is not an
// error: Result.Events is empty and Result.Kinds says what there is.
func Compare(ctx context.Context, db Reader, opts Options) (*Result, store.Warnings, error) {
	return compare(ctx, db, opts, nil)
}

// compare is Compare, also handing every batch of an event's two windows
// to each (when not nil) with the time that splits them: samples at or
// after split are in A.
func compare(ctx context.Context, db Reader, opts Options, each func(b *store.Batch, split int64)) (*Result, store.Warnings, error) {
	if opts.Window <= 0 || opts.Window > MaxWindow {
		return nil, nil, fmt.Errorf("prediff: window %v out of range (1ns to %v)", time.Duration(opts.Window), time.Duration(MaxWindow))
	}
	limit := opts.MaxEvents
	if limit <= 0 {
		limit = DefaultMaxEvents
	}
	res := &Result{Events: []Event{}, Nodes: []NodeSum{}}
	matched := db.NodeEvents(opts.Range, store.EventFilter{Kinds: []string{opts.Kind}}, &opts.Filter)
	if len(matched) == 0 {
		res.Kinds = map[string]int{}
		for _, e := range db.NodeEvents(opts.Range, store.EventFilter{}, &opts.Filter) {
			if k := e.Kind(); k != "" {
				res.Kinds[k]++
			}
		}
		return res, nil, nil
	}
	if len(matched) > limit {
		matched, res.More = matched[:limit], true
	}
	acc := newAccumulator(opts)
	var warnings store.Warnings
	nodes := map[string]*NodeSum{}
	for _, e := range matched {
		f := opts.Filter
		f.Nodes, f.NodeRegex, f.NodeLabels = []string{e.Node}, nil, nil
		r := store.Range{From: max(0, e.Time-2*opts.Window), To: e.Time}
		split := e.Time - opts.Window
		ev := Event{Node: e.Node, Time: e.Time, Source: e.Source, Text: e.Text}
		if r.To > r.From {
			acc.begin()
			w, err := db.Select(ctx, r, &f, func(b *store.Batch) error {
				acc.add(b, split)
				if each != nil {
					each(b, split)
				}
				return nil
			})
			warnings = append(warnings, w...)
			if err != nil {
				return nil, warnings, fmt.Errorf("the windows before %s's event at %s: %w", e.Node, query.FormatTime(e.Time), err)
			}
			acc.end(&ev)
		}
		ns := nodes[e.Node]
		if ns == nil {
			ns = &NodeSum{Node: e.Node}
			nodes[e.Node] = ns
		}
		ns.Events++
		if ev.A > 0 || ev.B > 0 {
			ns.WithSamples++
			res.WithSamples++
		}
		ns.A += ev.A
		ns.B += ev.B
		ns.FocusA += ev.FocusA
		ns.FocusB += ev.FocusB
		if ev.FocusA > ev.FocusB {
			ns.FocusGrew++
		}
		res.A += ev.A
		res.B += ev.B
		res.Events = append(res.Events, ev)
	}
	for _, ns := range nodes {
		res.Nodes = append(res.Nodes, *ns)
	}
	slices.SortFunc(res.Nodes, func(a, b NodeSum) int { return cmp.Compare(a.Node, b.Node) })
	if opts.Table {
		res.Functions = acc.functions()
	}
	if opts.Tree {
		res.Root = acc.tree()
	}
	return res, warnings, nil
}
