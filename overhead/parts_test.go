package overhead

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
)

// TestGuardKeepsTheRateForWorkItDoesNotReduce: over the budget with what
// does not fall with the rate (new processes, new binaries) over it alone,
// the Guard gives up the Shedder's work first, then keeps the rate,
// reporting it once per run of such windows with what the cost was made
// of; over the budget where a lower rate can bring it within, it halves
// the rate.
func TestGuardKeepsTheRateForWorkItDoesNotReduce(t *testing.T) {
	sh := &countingShedder{}
	var kept []Kept
	g := newTestGuard(t, 99, Config{MaxCPU: 1, Shedder: sh, OnKept: func(k Kept) { kept = append(kept, k) }})
	processes := Cost{Share: 1.6, Parts: []PartShare{{"samples", 0.3, true}, {"new processes", 0.9, false}, {"symbol tables", 0.2, false}}}
	samples := Cost{Share: 1.6, Parts: []PartShare{{"samples", 1.2, true}, {"new processes", 0.3, false}, {"symbol tables", 0.1, false}}}
	// At 49 Hz the samples' part 1.8 of 2.0: a lower rate fits only at
	// 21.8 Hz, but a window cuts at most by half.
	deep := Cost{Share: 2.0, Parts: []PartShare{{"samples", 1.8, true}, {"new processes", 0.2, false}}}
	costs := []Cost{processes, processes, processes, {Share: 0.5}, processes, samples, deep}
	// Given up, kept, kept (one run), under the budget, kept (a second
	// run), halved (the samples' part at half fits: 0.4 + 0.6), then
	// halved again.
	want := []int{99, 99, 99, 99, 99, 49, 24}
	var got []int
	for _, c := range costs {
		g.observe(c)
		got = append(got, g.s.hz)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("frequencies %v, want %v", got, want)
	}
	if sh.shed != 1 {
		t.Errorf("the Shedder's work was given up %d times, want 1 (at the first window over)", sh.shed)
	}
	if len(kept) != 2 || g.RateKept() != 2 {
		t.Fatalf("kept reported %d times (RateKept %d), want 2: once per run of windows over the budget", len(kept), g.RateKept())
	}
	ev := kept[0].Event()
	for _, want := range []string{"1.600% of one CPU is over the 1% budget", "new processes 0.900%", "samples 0.300%", "the rest 0.200%", "symbol tables 0.200%", "over the budget alone and most of the cost: the rate stays at 99 Hz"} {
		if !strings.Contains(ev.Text, want) {
			t.Errorf("event text %q lacks %q", ev.Text, want)
		}
	}
	if i, j := strings.Index(ev.Text, "new processes"), strings.Index(ev.Text, "samples 0.300%"); i < 0 || j < i {
		t.Errorf("event text %q: the parts are not costliest first", ev.Text)
	}
	if ev.Labels[events.KindLabel] != events.KindOverheadGuard || ev.Labels["rate"] != "kept" || ev.Labels["cost"] != "new processes" {
		t.Errorf("event labels %v, want kind %s, rate=kept, cost=new processes", ev.Labels, events.KindOverheadGuard)
	}
	if changes := g.changes(t); len(changes) != 2 || !strings.Contains(changes[0].Reason, "samples 1.200%") {
		t.Errorf("changes %+v: want two, whose reasons say what the cost was made of", changes)
	}
}

// TestGuardRaisesByTheSamplesPart: raising, only the samples' part is
// scaled to the new rate: the work that does not fall with the rate does
// not grow with it either.
func TestGuardRaisesByTheSamplesPart(t *testing.T) {
	g := newTestGuard(t, 24, Config{MaxCPU: 1, TargetFrequency: 99})
	// 0.5 of which 0.1 the samples' part at 24 Hz: under 0.6 of the
	// budget up to 24*(0.6-0.4)/0.1 = 48 Hz, where the whole cost scaled
	// would have allowed 24*0.6/0.5 = 28.
	quiet := Cost{Share: 0.5, Parts: []PartShare{{"samples", 0.1, true}, {"new processes", 0.4, false}}}
	for range 3 {
		g.observe(quiet)
	}
	if g.s.hz != 48 {
		t.Errorf("raised to %d Hz, want 48", g.s.hz)
	}
}

// TestPartsOverWindows: the parts' CPU time is taken as the difference
// between two readings, summed by name over the windows judged together,
// and turned into percent of one CPU over their wall time.
func TestPartsOverWindows(t *testing.T) {
	prev := []Part{{Name: "samples", CPU: 30 * time.Millisecond, PerSample: true}, {Name: "new processes", CPU: 100 * time.Millisecond}, {Name: "symbol tables", CPU: 50 * time.Millisecond}}
	now := []Part{{Name: "samples", CPU: 60 * time.Millisecond, PerSample: true}, {Name: "new processes", CPU: 150 * time.Millisecond}, {Name: "symbol tables", CPU: 50 * time.Millisecond}, {Name: "unwind tables", CPU: 20 * time.Millisecond}}
	sum := addParts(nil, prev, now)
	later := []Part{{Name: "samples", CPU: 80 * time.Millisecond, PerSample: true}, {Name: "new processes", CPU: 160 * time.Millisecond}, {Name: "symbol tables", CPU: 70 * time.Millisecond}, {Name: "unwind tables", CPU: 20 * time.Millisecond}}
	sum = addParts(sum, now, later)
	got := partShares(sum, 10*time.Second)
	want := []PartShare{{"samples", 0.5, true}, {"new processes", 0.6, false}, {"symbol tables", 0.2, false}, {"unwind tables", 0.2, false}}
	if len(got) != len(want) {
		t.Fatalf("shares %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].PerSample != want[i].PerSample || got[i].Share < want[i].Share-1e-9 || got[i].Share > want[i].Share+1e-9 {
			t.Errorf("shares %v, want %v", got, want)
		}
	}
	for _, c := range []struct {
		cost Cost
		rest float64
		want bool
		why  string
	}{
		{Cost{1.4, []PartShare{{"samples", 0.5, true}, {"new processes", 0.6, false}, {"symbol tables", 0.2, false}}}, 0.1, true,
			"0.8 does not fall with the rate: 0.6 with the samples' part and the rest fits at a third of the rate"},
		{Cost{1.6, []PartShare{{"samples", 0.3, true}, {"new processes", 0.9, false}, {"symbol tables", 0.2, false}}}, 0.2, false,
			"1.1 does not fall with the rate, over the budget alone and most of the cost"},
		{Cost{2.4, []PartShare{{"samples", 1.3, true}, {"new processes", 1.1, false}}}, 0, true,
			"no rate fits, but the samples' part is most of the cost"},
	} {
		if got := c.cost.rateBound(1); got != c.want || math.Abs(c.cost.rest()-c.rest) > 1e-9 {
			t.Errorf("%+v: rate-bound %v, rest %v; want %v, %v (%s)", c.cost, got, c.cost.rest(), c.want, c.rest, c.why)
		}
	}
	if c := (Cost{Share: 2}); !c.rateBound(1) || c.split() != "" || c.largest() != "samples" {
		t.Errorf("a cost without parts: rate-bound %v, split %q, largest %q; want true, \"\", samples", c.rateBound(1), c.split(), c.largest())
	}
}
