// Package overview builds the fleet overview: one row per node, one column
// per time step, each cell the busy share of the node's busiest single CPU
// in that step (the "one saturated core" that a node's average CPU hides)
// and its total CPU time, with the node's events as marks on its row. It
// answers from the store's per-CPU summaries (Reader.NodeCPUSteps) when
// the filter allows, so a day of a large fleet costs no sample read. It
// owns the steps an overview is drawn at (Ladder), what it keeps of the
// summaries it read (Cells) and the warming that makes the first overview
// as fast as the next (Warm, Warmer).
package overview

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/heatscope/heatscope/store"
)

// Units of the overview's figures.
const (
	// UnitBusiest names what Node.Busiest holds: the CPU time of the
	// node's busiest CPU in a step over the wall time of the step the
	// node's data cover, 0 to 1 (every sample weighing its own sampling
	// period).
	UnitBusiest = "busiest-cpu-busy-share"
	// UnitTotal names what Node.CPU holds: CPU time of every CPU of the
	// node in a step, in seconds.
	UnitTotal = "cpu-seconds"
)

// MaxMarks bounds the event marks listed per node (all are counted).
const MaxMarks = 500

// Request is what an overview shows.
type Request struct {
	// Range is the time range, Step each column's length (ns).
	Range store.Range
	Step  int64
	// Filter selects nodes (node, label) and samples (command, frame, …).
	Filter *store.Filter
	// SampleFilter says whether Filter looks at samples, not only at
	// nodes: then nodes none of whose samples pass are left out.
	SampleFilter bool
}

// Overview is the answer.
type Overview struct {
	// Start is the first column's start, Unix seconds; Step a column's
	// length in seconds; Columns their number.
	Start   float64 `json:"start"`
	Step    float64 `json:"step"`
	Columns int     `json:"columns"`
	// BusiestUnit and TotalUnit name the units of Node.Busiest and
	// Node.CPU.
	BusiestUnit string `json:"busiestUnit"`
	TotalUnit   string `json:"totalUnit"`
	// Nodes are the rows, by name.
	Nodes []Node `json:"nodes"`
	// Hidden counts the nodes with samples in the range that the sample
	// filter left without any.
	Hidden int `json:"hidden"`
	// Message says why Nodes is empty ("" when it is not).
	Message string `json:"message"`
}

// Node is one row.
type Node struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	// Busiest is, per column, the busy share of the node's busiest CPU
	// (its CPU time over the wall time of the column the node's data
	// cover, Partial's seconds for a column they cover in part),
	// BusiestCPU that CPU (-1 when the column has no sample). These four hold a value per column,
	// so they are never empty in an answer; they are left out (nil) only
	// of the header of the API's compact encoding, which carries them as
	// binary columns.
	Busiest    []float64 `json:"busiest,omitempty"`
	BusiestCPU []int32   `json:"busiestCpu,omitempty"`
	// CPU is, per column, the CPU time of all the node's CPUs, seconds;
	// Samples the samples it stands for.
	CPU     []float64 `json:"cpu,omitempty"`
	Samples []int64   `json:"samples,omitempty"`
	// Partial lists the columns the node's data cover in part, with the
	// seconds they cover: the newest column up to the node's last sample
	// (a live head, a block still to come), the first from its first
	// sample's period, a column cut by the range's end. Never nil.
	Partial []Partial `json:"partial"`
	// Peak is the highest Busiest, at column PeakColumn (-1 without
	// samples).
	Peak       float64 `json:"peak"`
	PeakColumn int     `json:"peakColumn"`
	// EventCount counts the node's events in the range; Events lists the
	// first MaxMarks of them, by time.
	EventCount int    `json:"eventCount"`
	Events     []Mark `json:"events"`
}

// Partial is a column that a node's data cover in part.
type Partial struct {
	Column int `json:"column"`
	// Seconds is the wall time of the column covered, less than the
	// step: what the column's busy share is over.
	Seconds float64 `json:"seconds"`
}

// Mark is one event on a row.
type Mark struct {
	// Time is Unix seconds; Column the column it falls in.
	Time   float64 `json:"time"`
	Column int     `json:"column"`
	Kind   string  `json:"kind"`
	Source string  `json:"source"`
	Text   string  `json:"text"`
}

// Build computes the overview of req from db, reading the blocks' per-CPU
// steps through cells (nil: read each time).
func Build(ctx context.Context, db Reader, cells *Cells, req Request) (*Overview, store.Warnings, error) {
	r, step := req.Range, req.Step
	if step <= 0 || r.To <= r.From {
		return nil, nil, fmt.Errorf("overview: empty range or step")
	}
	cols := int((r.To - r.From + step - 1) / step)
	var cache store.CPUStepsCache
	if cells != nil {
		cache = cells
	}
	rows, warnings, err := db.NodeCPUSteps(ctx, r, step, req.Filter, cache)
	if err != nil {
		return nil, warnings, fmt.Errorf("overview: %w", err)
	}
	ov := &Overview{Start: seconds(r.From), Step: seconds(step), Columns: cols, BusiestUnit: UnitBusiest, TotalUnit: UnitTotal,
		Nodes: []Node{}}
	byName := map[string]int{}
	for _, nc := range rows {
		n := row(nc, r, step)
		if req.SampleFilter && !slices.ContainsFunc(n.Samples, func(c int64) bool { return c > 0 }) {
			ov.Hidden++
			continue
		}
		byName[n.Name] = len(ov.Nodes)
		ov.Nodes = append(ov.Nodes, n)
	}
	// Events of the selected nodes. Those of a node without samples in
	// the range make a row of their own unless a sample filter is given.
	for _, e := range db.NodeEvents(r, store.EventFilter{}, req.Filter) {
		k, ok := byName[e.Node]
		if !ok {
			if req.SampleFilter || e.Node == "" {
				continue
			}
			k = len(ov.Nodes)
			byName[e.Node] = k
			ov.Nodes = append(ov.Nodes, emptyRow(e.Node, e.NodeLabels, cols))
		}
		n := &ov.Nodes[k]
		n.EventCount++
		if len(n.Events) < MaxMarks {
			n.Events = append(n.Events, Mark{Time: seconds(e.Time), Column: int((e.Time - r.From) / step), Kind: e.Kind(),
				Source: e.Source, Text: e.Text})
		}
	}
	slices.SortFunc(ov.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	if len(ov.Nodes) == 0 {
		ov.Message = emptyMessage(db, req, ov.Hidden)
	}
	return ov, warnings, nil
}

// row turns one node's CPU time per step into shares and seconds.
func row(nc store.NodeCPU, r store.Range, step int64) Node {
	n := Node{Name: nc.Node, Labels: nc.Labels, Busiest: make([]float64, len(nc.BusiestNs)), BusiestCPU: nc.BusiestCPU,
		CPU: make([]float64, len(nc.TotalNs)), Samples: nc.Samples, Partial: []Partial{}, PeakColumn: -1, Events: []Mark{}}
	for s, ns := range nc.BusiestNs {
		// Over the wall time the node's data cover: the newest column is
		// cut short by the data's end (and the range's), and no CPU's
		// time in a step is more than that (store.NodeCPU.CoveredNs).
		length := nc.CoveredNs[s]
		if length > 0 && length < min(step, r.To-r.From-int64(s)*step) {
			n.Partial = append(n.Partial, Partial{Column: s, Seconds: math.Round(float64(length)/1e3) / 1e6})
		}
		// Rounded to 0.01% and to the µs of CPU time: a fleet's answer
		// is hundreds of thousands of figures.
		if length > 0 {
			n.Busiest[s] = math.Round(1e4*float64(ns)/float64(length)) / 1e4
		}
		n.CPU[s] = math.Round(float64(nc.TotalNs[s])/1e3) / 1e6
		if nc.BusiestCPU[s] >= 0 && (n.PeakColumn < 0 || n.Busiest[s] > n.Peak) {
			n.Peak, n.PeakColumn = n.Busiest[s], s
		}
	}
	return n
}

// emptyRow is the row of a node with events but no samples in the range.
func emptyRow(name string, labels map[string]string, cols int) Node {
	if labels == nil {
		labels = map[string]string{}
	}
	n := Node{Name: name, Labels: labels, Busiest: make([]float64, cols), BusiestCPU: make([]int32, cols),
		CPU: make([]float64, cols), Samples: make([]int64, cols), Partial: []Partial{}, PeakColumn: -1, Events: []Mark{}}
	for i := range n.BusiestCPU {
		n.BusiestCPU[i] = -1
	}
	return n
}

// NoNodeMessage says why an overview has no row when no node can give one:
// there is none yet (nodes is 0), or none of nodes passes the node filter.
func NoNodeMessage(nodes int) string {
	if nodes == 0 {
		return "No node has samples yet: nodes appear once they record (a fleet: once they upload a block)."
	}
	return fmt.Sprintf("None of the %d nodes matches the node filter.", nodes)
}

// emptyMessage says why no row is shown.
func emptyMessage(db Reader, req Request, hidden int) string {
	nodes := db.Nodes()
	window := fmt.Sprintf("from %s to %s", stamp(req.Range.From), stamp(req.Range.To))
	switch {
	case len(nodes) == 0, !slices.ContainsFunc(nodes, func(n store.NodeInfo) bool { return req.Filter.KeepsNode(n.Name, n.Labels) }):
		return NoNodeMessage(len(nodes))
	case hidden > 0:
		return fmt.Sprintf("No sample of the %d nodes with samples %s passes the filter.", hidden, window)
	}
	return fmt.Sprintf("No node has samples or events %s.", window)
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }
