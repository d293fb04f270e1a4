package overhead

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/workclock"
)

// Part is one kind of the agent's work and the CPU time it has taken so
// far: the samples' own path (PerSample: it falls with the sampling rate),
// or work that does not (a new process's mappings, a new binary's symbols
// or unwind table).
type Part struct {
	Name      string
	CPU       time.Duration
	PerSample bool
	// Spreads marks work done in bursts that each serve longer than a
	// window (the store's: a block written every 2 minutes, merges of
	// 10 and more of them), and Spread is then its CPU time with each
	// burst spread over the time it serves, from its end on: the Guard
	// judges the part by Spread, in place of CPU, so that a block's
	// write is the share of a CPU it costs over its 2 minutes, not a
	// window over the budget that halves the rate.
	Spreads bool
	Spread  time.Duration
	// OneOff marks work done once and then kept (a new binary's unwind
	// table compiled or its symbols read, then cached): the Guard judges
	// it spread evenly over Config.OneOffSpread from the reading it first
	// shows in (oneOffs), as it judges a part that Spreads, so that a
	// table compiled once is the share of a CPU it costs over that time,
	// not a window over the budget that gives up work or halves the rate.
	// Such work done again and again (new binaries all the time: a build)
	// still adds up to its whole cost once it has gone on that long.
	OneOff bool
}

// PartShare is a part's cost over a judged window, in percent of one CPU.
type PartShare struct {
	Name      string
	Share     float64
	PerSample bool
}

// Cost is a judged window's cost, in percent of one CPU, and the parts it
// was made of (Config.Parts); the rest is the cost outside the parts: the
// Go runtime (its collector, scheduler, timers) and whatever else no part
// times.
type Cost struct {
	Share float64
	Parts []PartShare
	// slopes are the parts' costs per Hz the Guard has learned (by name,
	// the rest as restName; rateModel), nil before it has: what a
	// prediction at another rate takes to grow or fall with it (falling).
	slopes map[string]float64
}

// rest is the cost outside the parts.
func (c Cost) rest() float64 {
	r := c.Share
	for _, p := range c.Parts {
		r -= p.Share
	}
	return max(r, 0)
}

// perSample is the cost of the parts marked PerSample (the samples' own
// path, the BPF program's runs, the store), as measured, and whether the
// parts are known at all: what falls with the rate before the Guard has
// learned otherwise (falling), and what the hard protections judge by
// (samplesAlone, rateBound, an undone cut's hold), so that no slope
// learned from noisy windows keeps the Guard from cutting a rate whose
// samples alone are over the budget. The rest was taken to stay when the
// rate changes: on a busy machine it did not follow the rate (0.34-0.80%
// of one CPU from 99 Hz down to 10 Hz, while the samples' part fell from
// 0.36% to 0.11%); on a quiet one it grew with it (rateModel), which the
// Guard now learns.
func (c Cost) perSample() (share float64, known bool) {
	if len(c.Parts) == 0 {
		return 0, false
	}
	for _, p := range c.Parts {
		if p.PerSample {
			share += p.Share
		}
	}
	return min(share, c.Share), true
}

// falling is the cost that falls with the rate, measured at cur, as the
// Guard predicts it: each part's learned cost per Hz (slopes) times cur,
// at most the part's share in this window; a part without a learned slope
// falls whole if it is marked PerSample (perSample) and not at all
// otherwise. known is false without parts.
func (c Cost) falling(cur int) (share float64, known bool) {
	if len(c.Parts) == 0 {
		return 0, false
	}
	part := func(name string, s float64, perSample bool) float64 {
		if perHz, ok := c.slopes[name]; ok && cur > 0 {
			return min(s, perHz*float64(cur))
		}
		if perSample {
			return s
		}
		return 0
	}
	for _, p := range c.Parts {
		share += part(p.Name, p.Share, p.PerSample)
	}
	share += part(restName, c.rest(), false)
	return min(share, c.Share), true
}

// samplesAlone reports whether what falls with the rate is over the budget
// by itself (a node with very many CPUs): no other lever and no wait can
// bring the cost within it, so the Guard lowers the rate at once, at
// start-up too, and no evidence from an earlier cut holds it back. A cost
// without known parts is taken to fall with the rate whole.
func (c Cost) samplesAlone(budget float64) bool {
	samples, known := c.perSample()
	return !known && c.Share > budget || samples > budget
}

// at is the cost the same work would have at the rate hz, measured at cur:
// what falls with the rate (falling: by the learned slopes) scaled to it,
// the rest as it is. Without known parts the whole cost is scaled.
func (c Cost) at(cur, hz int) float64 {
	samples, known := c.falling(cur)
	if !known {
		samples = c.Share
	}
	return c.Share - samples + samples*float64(hz)/float64(cur)
}

// largest is the name of the costliest part that does not fall with the
// rate, or "samples" when none is known.
func (c Cost) largest() string {
	name, most := "samples", 0.0
	for _, p := range c.Parts {
		if !p.PerSample && p.Share > most {
			name, most = p.Name, p.Share
		}
	}
	return name
}

// fitRate returns the rate at which the cost, at cur, would fit in budget:
// what falls with the rate (falling) scales with it, the rest does not. ok is
// false when no rate fits (what does not fall with the rate is over the
// budget alone: a node starting hundreds of processes, a build linking new
// binaries), when lowering the rate would lose samples of every process for
// a saving that cannot bring the cost under the budget. Without a known
// samples' part (no Config.Parts) every cut is taken to help: half the rate.
// With nothing that falls with the rate, every rate fits or none does.
func (c Cost) fitRate(cur int, budget float64) (hz int, ok bool) {
	samples, known := c.falling(cur)
	if !known {
		return cur / 2, true
	}
	fixed := c.Share - samples
	switch {
	case fixed >= budget:
		return cur, false
	case samples <= 0:
		return math.MaxInt32, true // nothing grows with the rate
	}
	return int(math.Floor(float64(cur)*(budget-fixed)/samples + 1e-9)), true
}

// rateBound reports whether lowering the rate is worth its lost samples:
// it can bring the cost within budget (fitRate), or what falls with the
// rate is at least half the cost, the main cost even where no rate fits,
// or over the budget by itself (samplesAlone: the rest may be the larger
// part, as the collector's was at 400 Hz, 1.9% of one CPU beside the
// samples' 1.5% and the BPF sampler's 0.7%, but the rate is what must
// come down).
//
// A fit is a rate at cur's scale no lower than floor (the Guard's
// MinFrequency): measured at load 16-34, 1.243% of one CPU at 24 Hz, of
// which 0.267% fell with the rate, "fitted" at 2 Hz, and the cut to 12 Hz
// bought nothing.
func (c Cost) rateBound(cur, floor int, budget float64) bool {
	if fit, ok := c.fitRate(cur, budget); ok && fit >= floor {
		return true
	}
	samples, _ := c.perSample()
	return samples >= c.Share/2 || c.samplesAlone(budget)
}

// split says what the cost was made of, costliest first: "samples
// 0.410%, new processes 0.300%, the rest 0.300%, symbol tables 0.200%".
func (c Cost) split() string {
	if len(c.Parts) == 0 {
		return ""
	}
	parts := slices.Clone(c.Parts)
	parts = append(parts, PartShare{Name: restName, Share: c.rest()})
	slices.SortStableFunc(parts, func(a, b PartShare) int {
		switch {
		case a.Share > b.Share:
			return -1
		case a.Share < b.Share:
			return 1
		}
		return 0
	})
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.3f%%", p.Name, p.Share)
	}
	return b.String()
}

// over is the reason a cost over the budget gives, with what it was made of.
func (c Cost) over(budget float64) string {
	s := fmt.Sprintf("agent CPU %.3f%% of one CPU is over the %.3g%% budget", c.Share, budget)
	if split := c.split(); split != "" {
		s += " (" + split + ")"
	}
	return s
}

// judged is the CPU time the Guard judges a part by: Spread for a part
// that Spreads, else CPU.
func (p Part) judged() time.Duration {
	if p.Spreads {
		return p.Spread
	}
	return p.CPU
}

// partShares turns the parts' CPU time over a judged wall time into
// shares, in percent of one CPU (Part.judged).
func partShares(cpu []Part, wall time.Duration) []PartShare {
	if len(cpu) == 0 || wall <= 0 {
		return nil
	}
	out := make([]PartShare, len(cpu))
	for i, p := range cpu {
		out[i] = PartShare{Name: p.Name, Share: 100 * max(0, p.judged()).Seconds() / wall.Seconds(), PerSample: p.PerSample}
	}
	return out
}

// spreadAdjustment is what judging the parts that spread by their Spread
// rather than their CPU adds to the CPU time measured (negative in a
// window a burst fell in).
func spreadAdjustment(parts []Part) time.Duration {
	var d time.Duration
	for _, p := range parts {
		if p.Spreads {
			d += p.Spread - p.CPU
		}
	}
	return d
}

// addParts adds the parts' CPU time (and Spread) from prev to now into
// sum, by name.
func addParts(sum []Part, prev, now []Part) []Part {
	for _, p := range now {
		d, ds := p.CPU, p.Spread
		if i := slices.IndexFunc(prev, func(q Part) bool { return q.Name == p.Name }); i >= 0 {
			d -= prev[i].CPU
			ds -= prev[i].Spread
		}
		if i := slices.IndexFunc(sum, func(q Part) bool { return q.Name == p.Name }); i >= 0 {
			sum[i].CPU += d
			sum[i].Spread += ds
		} else {
			sum = append(sum, Part{Name: p.Name, CPU: d, PerSample: p.PerSample, Spreads: p.Spreads, Spread: ds, OneOff: p.OneOff})
		}
	}
	return sum
}

// Kept is a run of windows over the budget in which the Guard kept the
// sampling rate, because what does not fall with the rate was over the
// budget alone and most of the cost (Cost.rateBound): reported once, at
// its first window.
type Kept struct {
	At time.Time
	// Hz is the rate kept; Cost the first window's cost, Budget the
	// budget, both in percent of one CPU.
	Hz     int
	Cost   Cost
	Budget float64
	// Why, when not empty, is a cut undone for buying nothing
	// (evidence.go): the reason the rate is kept, in place of what a
	// lower rate does not reduce.
	Why string
}

// Event is the kept rate as a system event of kind
// events.KindOverheadGuard, labelled rate=kept and cost= its costliest part.
func (k Kept) Event() events.Event {
	text := fmt.Sprintf("overhead guard: %s; what a lower sampling rate does not reduce is over the budget alone and most of the cost: the rate stays at %d Hz",
		k.Cost.over(k.Budget), k.Hz)
	labels := map[string]string{events.KindLabel: events.KindOverheadGuard, "rate": "kept", "cost": k.Cost.largest()}
	if k.Why != "" {
		text = fmt.Sprintf("overhead guard: back at %d Hz and kept there over the budget: %s", k.Hz, k.Why)
		labels["cut"] = "undone"
	}
	return events.Event{Time: k.At.UnixNano(), Source: EventSource, Severity: events.Warning, Text: text, Labels: labels}
}

// oneOff is a part's work done once and kept (Part.OneOff), as the Guard
// spreads it: its CPU time at the last reading, and each reading's
// increase spread over Config.OneOffSpread from that reading on.
type oneOff struct {
	last   time.Duration
	base   time.Duration // its CPU time at the first reading: before judging
	spread workclock.Spread
}

// spreadOneOffs returns parts with each OneOff part judged spread: marked
// Spreads, its Spread the CPU time it had at the Guard's first reading
// plus each later reading's increase spread over Config.OneOffSpread
// from that reading on (workclock.Spread).
func (g *Guard) spreadOneOffs(parts []Part, now time.Time) []Part {
	for i, p := range parts {
		if !p.OneOff {
			continue
		}
		st := g.oneOffs[p.Name]
		if st == nil {
			st = &oneOff{last: p.CPU, base: p.CPU}
			g.oneOffs[p.Name] = st
		}
		st.spread.Add(now, p.CPU-st.last, g.cfg.OneOffSpread)
		st.last = max(st.last, p.CPU)
		parts[i].Spreads, parts[i].Spread = true, st.base+st.spread.Total(now)
	}
	return parts
}
