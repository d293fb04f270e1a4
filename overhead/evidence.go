package overhead

import (
	"fmt"
	"sync/atomic"
	"time"
)

// evidence is what the Guard has seen of its windows and its cuts, with
// the cost's parts known (Config.Parts): it acts on what a window shows
// only where the window is evidence of what the agent costs.
//
//   - The first StartupWindows are start-up: the BPF programs' load, the
//     first processes' symbols and tables and the collections their
//     garbage brings, a cost that ends by itself. Over the budget there,
//     the Guard acts only where what falls with the rate is over it alone.
//   - A window over the budget by the rest alone (the timed parts within
//     it: the collector's and scheduler's work, which comes in bursts) is
//     one window; the Guard acts on the second in a row.
//   - A cut is a trial: the next window at the new rate is compared with
//     the cost the cut promised (what falls with the rate, scaled down).
//     Still over the budget having bought less than half of that, the
//     cut is undone at once (it lost samples of every process for
//     nothing) and the rate is kept over the budget, saying why, until
//     what falls with the rate grows by half again or is over the budget
//     alone, or for 10 minutes at most (holdFor).
//
// Without the parts (Guard.Observe) none of this applies: the whole cost
// is taken to fall with the rate, and every window over the budget cuts.
type evidence struct {
	// overLast is whether the last judged window was over the budget.
	overLast bool
	// startupSaid is whether a start-up window over the budget was
	// logged (once a run).
	startupSaid bool
	// trial is the last cut, until the window after it has judged it.
	trial *trial
	// held is set once a cut was undone: cuts are held back while it is.
	held *held
	// undone counts the cuts undone.
	undone atomic.Uint64
}

// trial is a cut under judgement: the rates, the cost before it and what
// it promised to save, in percent of one CPU.
type trial struct {
	from, to int
	before   Cost
	promised float64
}

// held is a cut that did not buy what it promised: the reason, when, and
// what fell with the rate then, per Hz, in percent of one CPU.
type held struct {
	why          string
	at           time.Time
	samplesPerHz float64
}

// holdFor is how long an undone cut holds the rate at most: the window
// that judged it may have been one burst (at a load of 16-25, the rest
// went from 0.54% to 1.47% of one CPU in the window after a cut), so a
// cut is tried again after it, at most one trial each 10 minutes.
const holdFor = 10 * time.Minute

// Undones returns how many cuts the Guard undid because they did not buy
// what they promised.
func (g *Guard) Undones() uint64 { return g.undone.Load() }

// waits reports whether a window over the budget is not yet evidence to
// act on: a start-up window, or a first window over by the rest alone.
// It logs why once a run of start-up windows, and at debug level
// otherwise.
func (g *Guard) waits(cost Cost, overLast bool) bool {
	budget := g.cfg.MaxCPU
	if cost.Share <= budget || len(cost.Parts) == 0 || cost.samplesAlone(budget) {
		return false
	}
	if g.judged.Load() <= uint64(g.cfg.StartupWindows) {
		g.overLast = false // no evidence for the window after start-up
		if !g.startupSaid {
			g.startupSaid = true
			g.cfg.Logger.Info("overhead guard: over the budget while starting up: judged again after start-up", "reason", cost.over(budget))
		}
		return true
	}
	if cost.Share-cost.rest() <= budget && !overLast {
		g.cfg.Logger.Debug("overhead guard: over the budget by the rest alone in one window: judged again at the next", "reason", cost.over(budget))
		return true
	}
	return false
}

// judgeTrial judges the last cut, if any, on the window after it, and
// undoes it if it did not buy what it promised. It reports whether it
// changed the rate.
func (g *Guard) judgeTrial(now time.Time, cur int, cost Cost) bool {
	t := g.trial
	g.trial = nil
	budget := g.cfg.MaxCPU
	if t == nil || cur != t.to || len(cost.Parts) == 0 || cost.Share <= budget || cost.samplesAlone(budget) ||
		t.before.Share-cost.Share >= t.promised/2 {
		return false
	}
	reason := fmt.Sprintf("the cut from %d to %d Hz bought %.3f%% of one CPU where it promised %.3f%%: agent CPU %.3f%% at %d Hz, %.3f%% at %d Hz, over the %.3g%% budget (at %d Hz: %s)",
		t.from, t.to, t.before.Share-cost.Share, t.promised, t.before.Share, t.from, cost.Share, t.to, budget, t.to, cost.split())
	if err := g.sampler.SetFrequency(t.from); err != nil {
		g.cfg.Logger.Error("overhead guard: cannot change the sampling frequency", "from_hz", cur, "to_hz", t.from, "err", err)
		return false
	}
	g.changes.Add(1)
	g.undone.Add(1)
	g.quiet = 0
	g.ceilings.drop(t.from)
	samples, _ := t.before.perSample()
	g.held = &held{why: reason, at: now, samplesPerHz: samples / float64(t.from)}
	g.cfg.Logger.Info("sampling frequency changed", "from_hz", cur, "to_hz", t.from, "reason", reason)
	g.noteChange(now, cur, t.from, reason)
	// The rate is kept from this window on: one run of windows kept.
	g.keeping = true
	g.kept.Add(1)
	k := Kept{At: now, Hz: t.from, Cost: cost, Budget: budget, Why: reason}
	g.cfg.Logger.Warn("overhead guard: over the budget, but a lower sampling rate did not reduce it: the rate stays", "hz", t.from, "reason", reason)
	if g.cfg.OnKept != nil {
		g.cfg.OnKept(k)
	}
	return true
}

// holds reports whether cuts are held back by an undone cut, lifting the
// hold once what falls with the rate has grown by half (per Hz) since, or
// is over the budget alone (a new reason to cut), or after holdFor.
func (g *Guard) holds(now time.Time, cur int, cost Cost) bool {
	if g.held == nil {
		return false
	}
	samples, known := cost.perSample()
	if !known || cost.samplesAlone(g.cfg.MaxCPU) || samples/float64(cur) > 1.5*g.held.samplesPerHz || now.Sub(g.held.at) >= holdFor {
		g.held = nil
		return false
	}
	return true
}
