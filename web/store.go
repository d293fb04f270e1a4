package web

import (
	"context"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/prediff"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// Reader is what the API reads (*store.Reader, and so *store.DB, implement
// it): the samples and events its views ask for (query, overview and
// prediff say what each of them reads), and the recordings and nodes its
// parameters name.
type Reader interface {
	query.Selector
	overview.Reader
	prediff.Reader
	// Sources and SourcesOf are the recordings (all, those f keeps) with
	// their spans.
	Sources() []store.SourceInfo
	SourcesOf(f *store.Filter) []store.SourceInfo
	Timeline(ctx context.Context, r store.Range, step int64, f *store.Filter) (*store.Steps, store.Warnings, error)
	Events(r store.Range, f store.EventFilter, limit int) (evs []events.Event, more bool)
	// InstanceNotices are the nodes two instances recorded as at once.
	InstanceNotices() store.Warnings
}

// EventLog takes the events POST /api/events stores: a recorder's store
// (*store.DB), not a read-only query service's. New finds it in its Reader.
type EventLog interface {
	ReadOnly() bool
	AppendEvent(e events.Event) error
}
