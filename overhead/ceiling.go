package overhead

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// ceilings are the rates the Guard cut from, each not tried again until
// the windows say it fits. Case b on a quiet machine (main at f848978)
// went 47 -> 94 -> 47 -> 81 -> 40 Hz: a rate measured over the budget was
// tried again three windows later on a prediction that had just failed
// there. A cut from a rate the Guard raised to remembers by how much the
// window that cut was over what the raise predicted (its miss): while it
// stands, every raise keeps that much further under the HighWater mark,
// and the rate itself is tried again only once each of the last
// RaiseAfter windows predicts it under the mark less its miss, by the
// slopes learned (rateModel): the node's cost has fallen since, or the
// slopes say more. A raise stops under the lowest ceiling the windows do
// not show to fit. A miss is kept for missFor: a cut may come from a load
// that came and went (a build) rather than from a wrong prediction, and
// an agent recording for days must not stay under it for good.
type ceilings struct {
	list []ceiling // by rate, lowest first
	// raised is the last raise, while the rate is where it went.
	raised *raised
	// pending is the raise decide chose, until the rate is changed.
	pending raised
	// lowest is the lowest ceiling's rate, 0 when none (Ceiling).
	lowest atomic.Int64
}

// ceiling is a rate cut from, when, and by how much the window that cut
// was over what the raise to it predicted (0 for a rate the Guard did not
// raise to, as the target at start), in percent of one CPU.
type ceiling struct {
	hz   int
	at   time.Time
	miss float64
}

// missFor is how long a ceiling's miss holds raises back: three times
// the windows the slopes are learned over, so that a cut's miss is tried
// again at most once each 30 minutes; the ceiling itself stays until the
// windows show its rate to fit.
const missFor = 30 * time.Minute

// missAt is the ceiling's miss at now: 0 once missFor has passed.
func (e ceiling) missAt(now time.Time) float64 {
	if now.Sub(e.at) >= missFor {
		return 0
	}
	return e.miss
}

// raised is a raise: its rate and the cost it predicted there (the
// dearest of the windows it was made on).
type raised struct {
	to        int
	predicted float64
}

// minRaiseStep is the smallest raise, as a fraction of the rate (1/8),
// but to the target: a raise from 49 to 50 Hz was a change, a log line
// and a piece of the episode's event for 2% more samples.
const minRaiseStep = 8

// recentCost is a judged window's cost and the rate it was measured at.
type recentCost struct {
	hz   int
	cost Cost
}

// Ceiling returns the lowest rate the Guard cut from and has not tried
// again (0 when none).
func (g *Guard) Ceiling() int { return int(g.ceilings.lowest.Load()) }

// learn adds a judged window at cur to what the Guard has learned (its
// windows past start-up to the model, every window to the recent ones)
// and returns the cost with the slopes learned.
func (g *Guard) learn(cur int, cost Cost) Cost {
	if g.judged.Load() > uint64(g.cfg.StartupWindows) {
		g.model.add(cur, cost)
	}
	cost.slopes = g.model.slopes()
	g.slopesMu.Lock()
	g.learned = sortedSlopes(cost.slopes)
	g.slopesMu.Unlock()
	g.recent = append(g.recent, recentCost{hz: cur, cost: cost})
	if len(g.recent) > g.cfg.RaiseAfter {
		g.recent = slices.Delete(g.recent, 0, len(g.recent)-g.cfg.RaiseAfter)
	}
	return cost
}

// raise returns the rate to raise cur to after RaiseAfter windows in a row
// predicted a higher rate to fit, and why; cur when none may be tried.
// Each window is judged by the slopes learned now (cost's): the raise goes
// only as far as the dearest of them allows, at most doubling, and stops
// under the lowest ceiling that they do not show to fit (ceilings).
func (g *Guard) raise(now time.Time, cur int, cost Cost) (int, string) {
	high := g.cfg.HighWater * g.cfg.MaxCPU
	var windows []Cost
	for _, w := range g.recent {
		if w.hz == cur {
			w.cost.slopes = cost.slopes
			windows = append(windows, w.cost)
		}
	}
	margin := g.ceilings.miss(now, cur)
	next := min(2*cur, g.cfg.TargetFrequency)
	for _, w := range windows {
		fit, ok := w.fitRate(cur, high-margin)
		if !ok {
			return cur, ""
		}
		next = min(next, fit)
	}
	next, lifted := g.ceilings.bound(now, cur, next, windows, high)
	if next <= cur || next < g.cfg.TargetFrequency && next-cur < cur/minRaiseStep {
		return cur, ""
	}
	g.quiet = 0
	predicted := 0.0
	for _, w := range windows {
		predicted = max(predicted, w.at(cur, next))
	}
	g.ceilings.pending = raised{to: next, predicted: predicted}
	mark := fmt.Sprintf("%.0f%% of the %.3g%% budget", 100*g.cfg.HighWater, g.cfg.MaxCPU)
	if margin > 0 {
		mark += fmt.Sprintf(" less %.3f%%, what a raise missed by", margin)
	}
	return next, fmt.Sprintf("agent CPU %.3f%% of one CPU, at most %.3f%% predicted at %d Hz by each of the last %d windows, under %s (%s; %s)%s",
		cost.Share, predicted, next, len(windows), mark, cost.split(), g.model.saySlopes(cost.slopes), lifted)
}

// bound returns next held under the lowest ceiling above cur that the
// windows (at cur) do not show to fit: each predicts the ceiling's rate
// at or under high, less its miss at now. The ceilings they show to fit
// are lifted, said in lifted.
func (c *ceilings) bound(now time.Time, cur, next int, windows []Cost, high float64) (int, string) {
	var lifted strings.Builder
	for len(c.list) > 0 && c.list[0].hz <= next {
		top := c.list[0]
		if top.hz > cur {
			miss := top.missAt(now)
			for _, w := range windows {
				if w.at(cur, top.hz) > high-miss {
					c.publish()
					return min(next, top.hz-1), lifted.String()
				}
			}
			fmt.Fprintf(&lifted, "; %d Hz, cut from before, fits again by the windows (within %.3f%% of the %.0f%% mark, what its raise missed by)", top.hz, miss, 100*high)
		}
		c.list = c.list[1:]
	}
	c.publish()
	return next, lifted.String()
}

// miss returns the largest miss at now of the ceilings above cur.
func (c *ceilings) miss(now time.Time, cur int) float64 {
	m := 0.0
	for _, e := range c.list {
		if e.hz > cur {
			m = max(m, e.missAt(now))
		}
	}
	return m
}

// noteRate records a change from cur to next made at now on a window that
// cost share: a cut adds cur as a ceiling, with what the raise to it
// missed by; a raise becomes the last raise.
func (c *ceilings) noteRate(now time.Time, cur, next int, share float64) {
	switch {
	case next > cur:
		r := c.pending
		c.raised = &r
	case next < cur:
		miss := 0.0
		if r := c.raised; r != nil && r.to == cur {
			miss = max(0, share-r.predicted)
		}
		c.raised = nil
		c.add(ceiling{hz: cur, at: now, miss: miss})
	}
}

// add adds a ceiling, replacing one at the same rate.
func (c *ceilings) add(top ceiling) {
	i, found := slices.BinarySearchFunc(c.list, top.hz, func(e ceiling, hz int) int { return e.hz - hz })
	if found {
		c.list[i] = top
	} else {
		c.list = slices.Insert(c.list, i, top)
	}
	c.publish()
}

// drop removes the ceiling at hz, if any: a cut from it undone.
func (c *ceilings) drop(hz int) {
	c.list = slices.DeleteFunc(c.list, func(e ceiling) bool { return e.hz == hz })
	c.raised = nil
	c.publish()
}

func (c *ceilings) publish() {
	low := 0
	if len(c.list) > 0 {
		low = c.list[0].hz
	}
	c.lowest.Store(int64(low))
}
