package overview

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// WarmStore is what warming reads and warms (*store.Reader).
type WarmStore interface {
	// SourcesOf gives the recordings' spans (the whole span to warm).
	SourcesOf(f *store.Filter) []store.SourceInfo
	// WarmCPUSteps keeps the blocks' per-CPU cells at a step.
	WarmCPUSteps(ctx context.Context, step int64) (store.WarmResult, error)
}

// Warm warms st for the overview a user opening the UI's fleet page first
// sees (the whole span of every node in columns columns: the UI asks for
// as many as fit its width, three pixels each), and for every coarser step
// of Ladder (a narrower window, a longer span): it reads the blocks'
// per-CPU summaries not yet warm at that overview's WarmStep, in the
// caller's goroutine (store.Reader.WarmCPUSteps). With no node yet, it does
// nothing.
func Warm(ctx context.Context, st WarmStore, columns int) (store.WarmResult, error) {
	if columns < 1 || columns > MaxColumns {
		return store.WarmResult{}, fmt.Errorf("warm fleet overview: %d columns, want 1 to %d", columns, MaxColumns)
	}
	var all store.Filter
	r, ok := query.Span(st.SourcesOf(&all), all.Sources)
	if !ok {
		return store.WarmResult{}, nil
	}
	r.From, r.To = max(r.From, 0), min(r.To, query.MaxTime) // the times a query takes
	return st.WarmCPUSteps(ctx, WarmStep(Step(r, columns)))
}

// Warmer runs the warming passes of a query service (Warm) as blocks
// arrive, logging what each read.
type Warmer struct {
	Store   WarmStore
	Columns int
	Logger  *slog.Logger
	// done is set once a pass left nothing pending: passes after it (the
	// blocks that arrive) log at debug level only.
	done bool
}

// Pass runs a pass, logging what it read and how long it took when it
// read anything. Call it from one goroutine at a time.
func (w *Warmer) Pass(ctx context.Context) {
	res, err := Warm(ctx, w.Store, w.Columns)
	if err != nil && ctx.Err() == nil {
		w.Logger.Warn("warm the fleet overview", "err", err, "warmed", res.Warmed, "pending", res.Pending)
		return
	}
	if res.Warmed == 0 {
		return
	}
	level := slog.LevelInfo
	if w.done {
		level = slog.LevelDebug
	}
	w.done = w.done || res.Pending == 0
	w.Logger.Log(ctx, level, "warmed the fleet overview", "blocks", res.Warmed, "alreadyWarm", res.Cached, "pending", res.Pending, "corrupt", res.Failed, "sparse", res.Sparse,
		"step", time.Duration(res.Step), "bytes", res.Bytes, "took", res.Took.Round(time.Millisecond))
}
