package query

import (
	"context"

	"github.com/heatscope/heatscope/store"
)

// Selector is what the views read: the samples of a time range that pass
// a filter, batch by batch, each batch weighing its own sampling period
// (store.Batch.Weight). *store.Reader implements it, over the blocks a
// fleet uploaded, and so *store.DB, over a recorder's head and blocks.
type Selector interface {
	Select(ctx context.Context, r store.Range, f *store.Filter, fn func(*store.Batch) error) (store.Warnings, error)
}
