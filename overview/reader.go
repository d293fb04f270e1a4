package overview

import (
	"context"

	"github.com/heatscope/heatscope/store"
)

// Reader is what an overview reads (*store.Reader implements it): the nodes'
// CPU time per step, from the blocks' per-CPU summaries where it can, the
// nodes' events, and the nodes known (to say why an overview is empty).
type Reader interface {
	NodeCPUSteps(ctx context.Context, r store.Range, step int64, f *store.Filter, cache store.CPUStepsCache) ([]store.NodeCPU, store.Warnings, error)
	NodeEvents(r store.Range, ef store.EventFilter, f *store.Filter) []store.NodeEvent
	Nodes() []store.NodeInfo
}
