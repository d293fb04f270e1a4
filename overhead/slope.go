package overhead

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// rateModel is what the Guard learns, from its own judged windows, of how
// each part of the cost (the rest included) grows with the sampling rate:
// a cost per Hz, fitted over the windows it has seen at different rates.
//
// Case b of the churn benchmark for 10 minutes on a quiet machine (main
// at f848978) showed why a fixed model is not enough: the Guard took the
// rest (the Go runtime's work, outside every timed part) and new
// processes not to grow with the rate, but measured they did (the rest
// 0.18-0.28% of one CPU at 38-50 Hz, 0.31-0.37% at 64-94 Hz; new
// processes 0.10-0.17% and 0.19-0.24%: a process sampled more often is
// more often one the agent sets up), so each raise, to a rate predicted at
// 0.86-0.90% of one CPU, cost 1.04-1.28% and was cut again: 13 changes
// between 38 and 94 Hz.
//
// The fit is robust to a window's noise (in that run a window's cost
// strayed up to 0.14% of one CPU from the line through them all): the
// windows at one rate count by their median, once there are two; the
// slope is the median of the slopes between every two rates at least a
// quarter apart (a Theil-Sen estimate; two rates close together turn a
// window's noise into a wild slope); and a cost never falls as the rate
// rises (a negative slope is taken as none). A part seen at fewer than two
// such rates keeps its prior: the parts marked PerSample in proportion to
// the rate, the others flat.
type rateModel struct {
	// windows are the last modelWindows judged windows past start-up,
	// oldest first.
	windows []modelWindow
}

// modelWindow is one judged window: its rate and each part's share of
// one CPU, the rest included (by restName).
type modelWindow struct {
	hz    int
	parts map[string]float64
}

// modelWindows is how many of the last judged windows the model is
// fitted over: 10 minutes of 10 s windows, long enough to hold the rates a
// cut and a raise visit, short enough that what the node does now (its
// churn, its builds) is what the slopes say.
const modelWindows = 60

// restName is the name the rest (the cost outside every part) goes by.
const restName = "the rest"

// minRateRatio is how far apart two rates must be for the cost between
// them to give a slope: a quarter (49 and 64 Hz do, 47 and 50 Hz do not).
const minRateRatio = 1.25

// minRateWindows is how many windows a rate needs for its median to count:
// one window is no median. On a busy machine (load 12-18) the first
// windows at 99, 49 and 24 Hz, one each, cost 1.60%, 1.19% and 1.03% of
// one CPU, moving with the machine's load as much as with the rate, and
// slopes were taken through them.
const minRateWindows = 2

// add takes one judged window's cost at hz.
func (m *rateModel) add(hz int, c Cost) {
	w := modelWindow{hz: hz, parts: make(map[string]float64, len(c.Parts)+1)}
	for _, p := range c.Parts {
		w.parts[p.Name] = p.Share
	}
	w.parts[restName] = c.rest()
	if len(m.windows) == modelWindows {
		m.windows = slices.Delete(m.windows, 0, 1)
	}
	m.windows = append(m.windows, w)
}

// slopes returns each part's learned cost per Hz, in percent of one CPU,
// for the parts seen at two rates at least minRateRatio apart, each in
// minRateWindows windows (nil when none is).
func (m *rateModel) slopes() map[string]float64 {
	names := map[string]bool{}
	for _, w := range m.windows {
		for name := range w.parts {
			names[name] = true
		}
	}
	var out map[string]float64
	for name := range names {
		if s, ok := m.slope(name); ok {
			if out == nil {
				out = map[string]float64{}
			}
			out[name] = s
		}
	}
	return out
}

// slope is one part's Theil-Sen slope over the rates it was seen at in
// minRateWindows windows or more: the median of its windows at each rate,
// then the median of the slopes
// between every two of those rates at least minRateRatio apart, never
// negative. ok is false when no two rates are that far apart.
func (m *rateModel) slope(name string) (perHz float64, ok bool) {
	byRate := map[int][]float64{}
	for _, w := range m.windows {
		if s, seen := w.parts[name]; seen {
			byRate[w.hz] = append(byRate[w.hz], s)
		}
	}
	rates := make([]int, 0, len(byRate))
	for hz, shares := range byRate {
		if len(shares) >= minRateWindows {
			rates = append(rates, hz)
		}
	}
	slices.Sort(rates)
	level := make([]float64, len(rates))
	for i, hz := range rates {
		level[i] = median(byRate[hz])
	}
	var slopes []float64
	for i := range rates {
		for j := i + 1; j < len(rates); j++ {
			if float64(rates[j]) >= minRateRatio*float64(rates[i]) {
				slopes = append(slopes, (level[j]-level[i])/float64(rates[j]-rates[i]))
			}
		}
	}
	if len(slopes) == 0 {
		return 0, false
	}
	return max(0, median(slopes)), true
}

// rates returns how many windows the model holds and at how many rates.
func (m *rateModel) rates() (windows, rates int) {
	seen := map[int]bool{}
	for _, w := range m.windows {
		seen[w.hz] = true
	}
	return len(m.windows), len(seen)
}

// median returns the median of xs (not empty); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// PartSlope is what the Guard has learned of one part's cost per Hz of
// the sampling rate, in percent of one CPU (the rest is the part named
// "the rest").
type PartSlope struct {
	Name  string
	PerHz float64
}

// Slopes returns the parts' costs per Hz the Guard has learned from its
// windows (Config.Parts), by name; a part not yet seen at two rates far
// enough apart is left out (the Guard then takes the parts marked
// PerSample to grow in proportion to the rate and the others as flat).
// Safe to call while Run runs.
func (g *Guard) Slopes() []PartSlope {
	g.slopesMu.Lock()
	defer g.slopesMu.Unlock()
	return slices.Clone(g.learned)
}

// saySlopes says the slopes a prediction used, costliest per Hz first:
// "learned over 24 windows at 3 rates: the rest 0.0025%, samples 0.0031%
// of one CPU per Hz", or that none is learned yet.
func (m *rateModel) saySlopes(slopes map[string]float64) string {
	windows, rates := m.rates()
	seen := fmt.Sprintf("%d windows at %d rates", windows, rates)
	if rates == 1 {
		seen = fmt.Sprintf("%d windows at 1 rate", windows)
	}
	if len(slopes) == 0 {
		return "no slope learned yet (" + seen + "): the samples' parts taken in proportion to the rate, the rest flat"
	}
	names := make([]string, 0, len(slopes))
	for name := range slopes {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(slopes[b], slopes[a]), strings.Compare(a, b))
	})
	var b strings.Builder
	fmt.Fprintf(&b, "per Hz, learned over %s: ", seen)
	for i, name := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.4f%%", name, slopes[name])
	}
	return b.String()
}

// sortedSlopes returns slopes as PartSlopes sorted by name.
func sortedSlopes(slopes map[string]float64) []PartSlope {
	out := make([]PartSlope, 0, len(slopes))
	for name, s := range slopes {
		out = append(out, PartSlope{Name: name, PerHz: s})
	}
	slices.SortFunc(out, func(a, b PartSlope) int { return strings.Compare(a.Name, b.Name) })
	return out
}
