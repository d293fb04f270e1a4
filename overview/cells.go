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
	// DefaultStepBytes bounds the other steps, a zoom's and the store's
	// timelines' (Timelines) in one budget: a zoom of 500 nodes into an
	// hour at 10 s steps (360 steps × 8 CPUs × 4 bytes a block) is 5.8 MB.
	DefaultStepBytes = 16 << 20
)

// Cells keeps what fleet overviews read of the blocks' per-CPU summaries
// (store.CPUSteps, per block), so that drawing an overview again reads
// nothing: the warm steps a warming pass reads (Warm), at the step that
// serves the first overview and every coarser one, and apart from them
// the steps of the last step each block was asked at that the warm ones do
// not serve (a zoom's). It is the store.CPUStepsCache Build reads through.
// A query service holds one, shared by its API (web), its warming
// (Warmer), /metrics (Stats) and its store's timelines of every thread
// (Timelines: the store's Reader.KeepStepsIn), so that one budget bounds
// every per-CPU step the service keeps besides the warm ones. Safe for
// concurrent use; one warming pass at a time.
type Cells struct {
	warmBudget, stepBudget int64

	// mu guards the warm steps: warm by block, their memory, the blocks
	// whose summary warming found corrupt, and the step last warmed (0:
	// none).
	mu        sync.RWMutex
	warm      map[*store.Block]*store.CPUSteps
	warmBytes int64
	failed    map[*store.Block]bool
	warmStep  int64

	// steps holds, in one LRU within stepBudget, each block's steps of
	// the last step a zoom asked and of the last step a timeline asked
	// (one entry of each at most): apart, so that a timeline and an
	// overview at other steps over the same blocks do not evict each
	// other.
	steps *lru.Cache[stepsKey, *store.CPUSteps]
}

// stepsKey is a block's entry in Cells.steps: a zoom's, or a timeline's.
type stepsKey struct {
	block    *store.Block
	timeline bool
}

// NewCells returns an empty Cells whose warm steps hold at most warmBytes
// (past it, warming leaves the remaining blocks to the queries) and whose
// other steps (zooms' and timelines') hold at most stepBytes together
// (least recently used first out); 0 is the default (DefaultWarmBytes,
// DefaultStepBytes).
func NewCells(warmBytes, stepBytes int64) *Cells {
	if warmBytes <= 0 {
		warmBytes = DefaultWarmBytes
	}
	if stepBytes <= 0 {
		stepBytes = DefaultStepBytes
	}
	return &Cells{warmBudget: warmBytes, stepBudget: stepBytes, warm: map[*store.Block]*store.CPUSteps{}, failed: map[*store.Block]bool{},
		steps: lru.New[stepsKey](stepBytes, (*store.CPUSteps).Bytes, nil)}
}

// CPUSteps returns b's steps that serve r at step: its warm steps, a
// zoom's or a timeline's, the coarsest of those that do; nil when none
// does.
func (c *Cells) CPUSteps(b *store.Block, r store.Range, step int64, idle bool) *store.CPUSteps {
	c.mu.RLock()
	warm := c.warm[b]
	c.mu.RUnlock()
	best := warm
	if best != nil && !best.Serves(r, step, idle) {
		best = nil
	}
	for _, timeline := range []bool{false, true} {
		if s, ok := c.steps.Get(stepsKey{b, timeline}); ok && s.Serves(r, step, idle) && (best == nil || s.Step() > best.Step()) {
			best = s
		}
	}
	return best
}

// KeepCPUSteps keeps steps an overview read of b in place of the zoom's
// steps b had, unless b has left its store meanwhile.
func (c *Cells) KeepCPUSteps(b *store.Block, s *store.CPUSteps) { c.keep(stepsKey{b, false}, s) }

func (c *Cells) keep(k stepsKey, s *store.CPUSteps) {
	c.steps.Remove(k)
	c.steps.AddIf(k, s, func() bool { return !k.block.Retired() })
}

// Timelines is the store.CPUStepsCache a store's timelines of every
// thread keep their steps in (store.Reader.KeepStepsIn) within the budget
// of c's zooms: it answers from any steps c holds that serve, and keeps
// what a timeline read apart from the zoom's.
func (c *Cells) Timelines() store.CPUStepsCache { return timelineCells{c} }

type timelineCells struct{ c *Cells }

func (t timelineCells) CPUSteps(b *store.Block, r store.Range, step int64, idle bool) *store.CPUSteps {
	return t.c.CPUSteps(b, r, step, idle)
}

func (t timelineCells) KeepCPUSteps(b *store.Block, s *store.CPUSteps) {
	t.c.keep(stepsKey{b, true}, s)
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
	// StepBytes is the memory of the steps at other steps (zooms', and
	// timelines' kept through Timelines).
	StepBytes int64
	// WarmLimit and StepLimit are the bounds of WarmBytes and StepBytes
	// (NewCells).
	WarmLimit, StepLimit int64
}

// Stats says what c holds of st's blocks now: those that arrived since the
// last warming pass count as pending.
func (c *Cells) Stats(st BlockLister) Stats {
	blocks := st.CPUSummaryBlocks()
	defer closeAll(blocks)
	c.prune()
	c.mu.RLock()
	defer c.mu.RUnlock()
	s := Stats{WarmBytes: c.warmBytes, StepBytes: c.steps.Weight(), WarmLimit: c.warmBudget, StepLimit: c.stepBudget}
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
	c.steps.RemoveFunc(func(k stepsKey) bool { return k.block.Retired() })
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
