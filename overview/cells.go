package overview

import (
	"sync"

	"github.com/heatscope/heatscope/lru"
	"github.com/heatscope/heatscope/store"
)

// Default budgets of a Cells (NewCells).
const (
	// DefaultWarmBytes bounds the warm steps: as much as the store's index
	// cache holds by default, beside it.
	DefaultWarmBytes = 32 << 20
	// DefaultZoomBytes bounds the steps of zooms: a zoom of 500 nodes into
	// an hour at 10 s steps (360 steps × 8 CPUs × 4 bytes a block) is
	// 5.8 MB.
	DefaultZoomBytes = 16 << 20
)

// Cells keeps what fleet overviews read of the blocks' per-CPU summaries
// (store.CPUSteps, per block), so that drawing an overview again reads
// nothing: the warm steps a warming pass reads (Warm), at the step that
// serves the first overview and every coarser one, and apart from them
// the steps of the last step each block was asked at that the warm ones do
// not serve (a zoom's). It is the store.CPUStepsCache Build reads through.
// A query service holds one, shared by its API (web), its warming
// (Warmer) and /metrics (Stats). Safe for concurrent use; one warming pass
// at a time.
type Cells struct {
	warmBudget int64

	// mu guards the warm steps: warm by block, their memory, the blocks
	// whose summary warming found corrupt, and the step last warmed (0:
	// none).
	mu        sync.RWMutex
	warm      map[*store.Block]*store.CPUSteps
	warmBytes int64
	failed    map[*store.Block]bool
	warmStep  int64

	zoom *lru.Cache[*store.Block, *store.CPUSteps]
}

// NewCells returns an empty Cells whose warm steps hold at most warmBytes
// (past it, warming leaves the remaining blocks to the queries) and whose
// zooms' steps hold at most zoomBytes (least recently used first out); 0
// is the default (DefaultWarmBytes, DefaultZoomBytes).
func NewCells(warmBytes, zoomBytes int64) *Cells {
	if warmBytes <= 0 {
		warmBytes = DefaultWarmBytes
	}
	if zoomBytes <= 0 {
		zoomBytes = DefaultZoomBytes
	}
	return &Cells{warmBudget: warmBytes, warm: map[*store.Block]*store.CPUSteps{}, failed: map[*store.Block]bool{},
		zoom: lru.New[*store.Block](zoomBytes, (*store.CPUSteps).Bytes, nil)}
}

// CPUSteps returns b's steps that serve r at step: its warm steps or a
// zoom's, the coarser when both do; nil when neither does.
func (c *Cells) CPUSteps(b *store.Block, r store.Range, step int64, idle bool) *store.CPUSteps {
	c.mu.RLock()
	warm := c.warm[b]
	c.mu.RUnlock()
	zoom, _ := c.zoom.Get(b)
	var best *store.CPUSteps
	for _, s := range []*store.CPUSteps{warm, zoom} {
		if s != nil && s.Serves(r, step, idle) && (best == nil || s.Step() > best.Step()) {
			best = s
		}
	}
	return best
}

// KeepCPUSteps keeps steps a query read of b in place of the zoom's steps
// b had, unless b has left its store meanwhile.
func (c *Cells) KeepCPUSteps(b *store.Block, s *store.CPUSteps) {
	c.zoom.Remove(b)
	c.zoom.AddIf(b, s, func() bool { return !b.Retired() })
}

// Stats is what Cells holds, for /metrics.
type Stats struct {
	// WarmBlocks counts the blocks whose steps are warm at the step the
	// last pass warmed, WarmPending those with a per-CPU summary still
	// cold at it but for those warming found corrupt or too sparse (0 and
	// 0 before any warming), and WarmBytes the memory the warm steps hold.
	WarmBlocks  int
	WarmPending int
	WarmBytes   int64
	// ZoomBytes is the memory of the steps at other steps (zooms),
	// bounded by NewCells's zoomBytes.
	ZoomBytes int64
}

// Stats says what c holds of st's blocks now: those that arrived since the
// last warming pass count as pending.
func (c *Cells) Stats(st BlockLister) Stats {
	blocks := st.CPUSummaryBlocks()
	defer closeAll(blocks)
	c.prune()
	c.mu.RLock()
	defer c.mu.RUnlock()
	s := Stats{WarmBytes: c.warmBytes, ZoomBytes: c.zoom.Weight()}
	if c.warmStep == 0 {
		return s
	}
	for _, b := range blocks {
		if w := c.warm[b]; w != nil && w.Step() == c.warmStep {
			s.WarmBlocks++
		} else if !c.failed[b] && !tooSparseToWarm(b, c.warmStep) {
			s.WarmPending++
		}
	}
	return s
}

// prune drops what c holds of blocks that left their store.
func (c *Cells) prune() {
	c.zoom.RemoveFunc((*store.Block).Retired)
	c.mu.Lock()
	defer c.mu.Unlock()
	for b, s := range c.warm {
		if b.Retired() {
			delete(c.warm, b)
			c.warmBytes -= s.Bytes()
		}
	}
	for b := range c.failed {
		if b.Retired() {
			delete(c.failed, b)
		}
	}
}

func closeAll(blocks []*store.Block) {
	for _, b := range blocks {
		b.Close()
	}
}
