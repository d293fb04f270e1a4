package overhead

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
)

// TestGuardKeepsTheRateForWorkItDoesNotReduce: over the budget with most
// of the cost in work a lower rate does not reduce (new processes, new
// binaries), the Guard gives up the Shedder's work first, then keeps the
// rate, reporting it once per run of such windows with what the cost was
// made of; a window over the budget that is mostly the samples' path
// halves the rate as before.
func TestGuardKeepsTheRateForWorkItDoesNotReduce(t *testing.T) {
	sh := &countingShedder{}
	var kept []Kept
	g := newTestGuard(t, 99, Config{MaxCPU: 1, Shedder: sh, OnKept: func(k Kept) { kept = append(kept, k) }})
	processes := Cost{Share: 1.6, Parts: []PartShare{{"new processes", 0.9}, {"symbol tables", 0.2}}}
	samples := Cost{Share: 1.6, Parts: []PartShare{{"new processes", 0.3}, {"symbol tables", 0.1}}}
	costs := []Cost{processes, processes, processes, {Share: 0.5}, processes, samples}
	// Given up, kept, kept (one run), under the budget, kept (a second
	// run), halved: the samples' path is 1.2 of the 1.6.
	want := []int{99, 99, 99, 99, 99, 49}
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
	for _, want := range []string{"1.600% of one CPU is over the 1% budget", "new processes 0.900%", "samples and the rest 0.500%", "symbol tables 0.200%", "stays at 99 Hz"} {
		if !strings.Contains(ev.Text, want) {
			t.Errorf("event text %q lacks %q", ev.Text, want)
		}
	}
	if i, j := strings.Index(ev.Text, "new processes"), strings.Index(ev.Text, "samples and the rest"); i < 0 || j < i {
		t.Errorf("event text %q: the parts are not costliest first", ev.Text)
	}
	if ev.Labels[events.KindLabel] != events.KindOverheadGuard || ev.Labels["rate"] != "kept" || ev.Labels["cost"] != "new processes" {
		t.Errorf("event labels %v, want kind %s, rate=kept, cost=new processes", ev.Labels, events.KindOverheadGuard)
	}
	if changes := g.changes(t); len(changes) != 1 || !strings.Contains(changes[0].Reason, "samples and the rest 1.200%") {
		t.Errorf("changes %+v: want one, whose reason says what the cost was made of", changes)
	}
}

// TestPartsOverWindows: the parts' CPU time is taken as the difference
// between two readings, summed by name over the windows judged together,
// and turned into percent of one CPU over their wall time.
func TestPartsOverWindows(t *testing.T) {
	prev := []Part{{"new processes", 100 * time.Millisecond}, {"symbol tables", 50 * time.Millisecond}}
	now := []Part{{"new processes", 150 * time.Millisecond}, {"symbol tables", 50 * time.Millisecond}, {"unwind tables", 20 * time.Millisecond}}
	sum := addParts(nil, prev, now)
	later := []Part{{"new processes", 160 * time.Millisecond}, {"symbol tables", 70 * time.Millisecond}, {"unwind tables", 20 * time.Millisecond}}
	sum = addParts(sum, now, later)
	got := partShares(sum, 10*time.Second)
	want := []PartShare{{"new processes", 0.6}, {"symbol tables", 0.2}, {"unwind tables", 0.2}}
	if len(got) != len(want) {
		t.Fatalf("shares %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Share < want[i].Share-1e-9 || got[i].Share > want[i].Share+1e-9 {
			t.Errorf("shares %v, want %v", got, want)
		}
	}
	if c := (Cost{Share: 0.5, Parts: got}); c.rest() != 0 || c.rateBound() {
		t.Errorf("parts above the whole cost: rest %v (want 0), rate-bound %v (want false)", c.rest(), c.rateBound())
	}
	if c := (Cost{Share: 2}); !c.rateBound() || c.split() != "" || c.largest() != "samples" {
		t.Errorf("a cost without parts: rate-bound %v, split %q, largest %q; want true, \"\", samples", c.rateBound(), c.split(), c.largest())
	}
}
