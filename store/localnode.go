package store

import "github.com/heatscope/heatscope/events"

// NodeLabel is the event label that names the node an event was recorded
// on; a bucket's events carry it (bucketstore sets it).
const NodeLabel = "node"

// LocalNode is the node of the DB's own data directory: a recorder's
// Options.Node, or, for a reader, the node of the directory's newest
// block (Options.Node when it holds none). The directory's own events,
// which carry no node label, are this node's.
func (db *DB) LocalNode() string {
	if !db.opts.ReadOnly || db.local == nil {
		return db.opts.Node
	}
	db.mu.RLock()
	defer db.mu.RUnlock()
	node, newest, found := db.opts.Node, int64(0), false
	for _, b := range db.blocks {
		if b.src == db.local && b.Meta.Node != "" && (!found || b.Meta.MaxTime > newest) {
			node, newest, found = b.Meta.Node, b.Meta.MaxTime, true
		}
	}
	return node
}

// EventNode is the node an event was recorded on: its node label, else
// the DB's LocalNode.
func (db *DB) EventNode(e *events.Event) string {
	if n := e.Labels[NodeLabel]; n != "" {
		return n
	}
	return db.LocalNode()
}
