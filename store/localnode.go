package store

import (
	"slices"

	"github.com/heatscope/heatscope/events"
)

// NodeLabel is the event label that names the node an event was recorded
// on; a bucket's events carry it (bucketstore sets it).
const NodeLabel = "node"

// LocalNode is the node of the DB's own data directory: a recorder's
// Options.Node, or, for a reader, the node of the directory's newest
// block (Options.Node when it holds none). The directory's own events,
// which carry no node label, are this node's.
func (rd *Reader) LocalNode() string {
	if !rd.opts.ReadOnly || rd.localBlocks == nil {
		return rd.opts.Node
	}
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	node, newest, found := rd.opts.Node, int64(0), false
	for _, b := range slices.Concat(rd.blocks, rd.shadowed) {
		if b.src == rd.localBlocks && b.Meta.Node != "" && (!found || b.Meta.MaxTime > newest) {
			node, newest, found = b.Meta.Node, b.Meta.MaxTime, true
		}
	}
	return node
}

// EventNode is the node an event was recorded on: its node label, else
// the DB's LocalNode.
func (rd *Reader) EventNode(e *events.Event) string {
	if n := e.Labels[NodeLabel]; n != "" {
		return n
	}
	return rd.LocalNode()
}

// NodeEvent is an event with the node it was recorded on.
type NodeEvent struct {
	events.Event
	Node string
	// NodeLabels are the node's labels (NodeInfo.Labels); nil for a node
	// whose samples the store does not hold.
	NodeLabels map[string]string
}

// NodeEvents returns the events in r that ef selects and that were
// recorded (EventNode) on the nodes f selects by name and by node label,
// in time order. f's other parts are not looked at.
func (rd *Reader) NodeEvents(r Range, ef EventFilter, f *Filter) []NodeEvent {
	evs, _ := rd.Events(r, ef, 0)
	labels := map[string]map[string]string{}
	for _, n := range rd.Nodes() {
		labels[n.Name] = n.Labels
	}
	out := make([]NodeEvent, 0, len(evs))
	for i := range evs {
		node := rd.EventNode(&evs[i])
		if f.KeepsNode(node, labels[node]) {
			out = append(out, NodeEvent{Event: evs[i], Node: node, NodeLabels: labels[node]})
		}
	}
	return out
}
