package prediff

import (
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// Reader is what a pre-event diff reads: the events that split the
// windows and the samples of each (*store.Reader implements it).
type Reader interface {
	query.Selector
	NodeEvents(r store.Range, ef store.EventFilter, f *store.Filter) []store.NodeEvent
}
