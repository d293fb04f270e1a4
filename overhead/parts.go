package overhead

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heatscope/heatscope/events"
)

// Part is one kind of the agent's work whose cost does not fall with the
// sampling rate (a new process's mappings, a new binary's symbols or
// unwind table), and the CPU time it has taken so far.
type Part struct {
	Name string
	CPU  time.Duration
}

// PartShare is a part's cost over a judged window, in percent of one CPU.
type PartShare struct {
	Name  string
	Share float64
}

// Cost is a judged window's cost, in percent of one CPU, and the parts of
// it that a lower sampling rate does not reduce (Config.Parts); the rest
// is the samples' own path (reading, symbolizing, storing them) and what
// the agent does whatever the rate.
type Cost struct {
	Share float64
	Parts []PartShare
}

// rest is the cost outside the parts.
func (c Cost) rest() float64 {
	r := c.Share
	for _, p := range c.Parts {
		r -= p.Share
	}
	return max(r, 0)
}

// largest is the name of the costliest part, or "samples" when the rest
// costs more than any part.
func (c Cost) largest() string {
	name, most := "samples", c.rest()
	for _, p := range c.Parts {
		if p.Share > most {
			name, most = p.Name, p.Share
		}
	}
	return name
}

// rateBound reports whether a lower rate would cut the cost: the samples'
// path and the rest are at least half of it. When the parts are most of it
// (a node starting hundreds of processes, a build linking new binaries),
// halving the rate loses half of every process's samples and saves little.
func (c Cost) rateBound() bool { return len(c.Parts) == 0 || c.rest() >= c.Share/2 }

// split says what the cost was made of, costliest first:
// "new processes 0.410%, symbol tables 0.200%, samples and the rest 0.610%".
func (c Cost) split() string {
	if len(c.Parts) == 0 {
		return ""
	}
	parts := slices.Clone(c.Parts)
	parts = append(parts, PartShare{Name: "samples and the rest", Share: c.rest()})
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

// partShares turns the parts' CPU time over a judged wall time into
// shares, in percent of one CPU.
func partShares(cpu []Part, wall time.Duration) []PartShare {
	if len(cpu) == 0 || wall <= 0 {
		return nil
	}
	out := make([]PartShare, len(cpu))
	for i, p := range cpu {
		out[i] = PartShare{Name: p.Name, Share: 100 * max(0, p.CPU).Seconds() / wall.Seconds()}
	}
	return out
}

// addParts adds the parts' CPU time from prev to now into sum, by name.
func addParts(sum []Part, prev, now []Part) []Part {
	for _, p := range now {
		d := p.CPU
		if i := slices.IndexFunc(prev, func(q Part) bool { return q.Name == p.Name }); i >= 0 {
			d -= prev[i].CPU
		}
		if i := slices.IndexFunc(sum, func(q Part) bool { return q.Name == p.Name }); i >= 0 {
			sum[i].CPU += d
		} else {
			sum = append(sum, Part{Name: p.Name, CPU: d})
		}
	}
	return sum
}

// Kept is a run of windows over the budget in which the Guard kept the
// sampling rate, because the cost was work a lower rate does not reduce
// (Cost.rateBound): reported once, at its first window.
type Kept struct {
	At time.Time
	// Hz is the rate kept; Cost the first window's cost, Budget the
	// budget, both in percent of one CPU.
	Hz     int
	Cost   Cost
	Budget float64
}

// Event is the kept rate as a system event of kind
// events.KindOverheadGuard, labelled rate=kept and cost= its costliest part.
func (k Kept) Event() events.Event {
	text := fmt.Sprintf("overhead guard: %s, most of it work a lower sampling rate does not reduce: the rate stays at %d Hz",
		k.Cost.over(k.Budget), k.Hz)
	labels := map[string]string{events.KindLabel: events.KindOverheadGuard, "rate": "kept", "cost": k.Cost.largest()}
	return events.Event{Time: k.At.UnixNano(), Source: EventSource, Severity: events.Warning, Text: text, Labels: labels}
}
