package overhead

import (
	"fmt"
	"time"

	"github.com/heatscope/heatscope/events"
)

// Shedder is work the agent can give up, to stay within its budget,
// before it lowers the sampling rate for every process: work worth less
// than the samples a halved rate loses (the table walk's new tables,
// whose processes' stacks are then walked with frame pointers).
type Shedder interface {
	// Shed gives the work up and says what it was; false when there is
	// none to give up.
	Shed() (what string, ok bool)
	// Restore takes the work up again.
	Restore()
}

// Shedding is one time the Guard gave up work (Config.Shedder) or, once
// the cost stayed low at the target rate, took it up again (Restored).
type Shedding struct {
	At time.Time
	// What is the work, as the Shedder says; Reason why the Guard acted.
	What, Reason string
	Restored     bool
}

// Event is the shedding as a system event of kind
// events.KindOverheadGuard, labelled shed=given-up or restored and
// work=What.
func (s Shedding) Event() events.Event {
	labels := map[string]string{events.KindLabel: events.KindOverheadGuard, "work": s.What, "shed": "given-up"}
	text := fmt.Sprintf("overhead guard: gave up %s before lowering the sampling rate: %s", s.What, s.Reason)
	sev := events.Warning
	if s.Restored {
		labels["shed"] = "restored"
		text = fmt.Sprintf("overhead guard: took up %s again: %s", s.What, s.Reason)
		sev = events.Notice
	}
	return events.Event{Time: s.At.UnixNano(), Source: EventSource, Severity: sev, Text: text, Labels: labels}
}

// shedFirst gives up the Shedder's work when the cost is over the budget
// and it has not been given up yet, and takes it up again once the cost
// has stayed under LowWater of the budget for RaiseAfter windows at the
// target rate (the rate comes back first, then the work). It reports
// whether it acted on this window (or counts towards acting): the rate
// then stays as it is.
func (g *Guard) shedFirst(now time.Time, cur int, cost Cost) bool {
	if g.cfg.Shedder == nil {
		return false
	}
	budget, share := g.cfg.MaxCPU, cost.Share
	switch {
	case share > budget && !g.shed:
		what, ok := g.cfg.Shedder.Shed()
		if !ok {
			return false
		}
		g.shed, g.quiet = true, 0
		g.sheds.Add(1)
		g.shedWhat = what
		reason := cost.over(budget)
		g.cfg.Logger.Info("overhead guard: gave up work before lowering the sampling rate", "work", what, "reason", reason)
		g.reportShed(Shedding{At: now, What: what, Reason: reason})
		return true
	case g.shed && cur >= g.cfg.TargetFrequency && share < g.cfg.LowWater*budget:
		g.quiet++
		if g.quiet < g.cfg.RaiseAfter {
			return true
		}
		g.quiet = 0
		g.cfg.Shedder.Restore()
		g.shed = false
		reason := fmt.Sprintf("agent CPU %.3f%% of one CPU has stayed under %.0f%% of the %.3g%% budget", share, 100*g.cfg.LowWater, budget)
		g.cfg.Logger.Info("overhead guard: took up work again", "work", g.shedWhat, "reason", reason)
		g.reportShed(Shedding{At: now, What: g.shedWhat, Reason: reason, Restored: true})
		return true
	}
	return false
}

func (g *Guard) reportShed(s Shedding) {
	if g.cfg.OnShed != nil {
		g.cfg.OnShed(s)
	}
}

// Shedding reports whether the Guard has given up the Shedder's work now.
func (g *Guard) Shedding() bool { return g.shedNow.Load() }

// Sheds returns how many times the Guard has given up the Shedder's work.
func (g *Guard) Sheds() uint64 { return g.sheds.Load() }
