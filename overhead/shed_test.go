package overhead

import (
	"slices"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/events"
)

// countingShedder is a Shedder that counts what it was asked.
type countingShedder struct {
	none           bool // nothing to give up
	shed, restored int
	givenUp        bool
}

func (s *countingShedder) Shed() (string, bool) {
	if s.none {
		return "", false
	}
	s.shed++
	s.givenUp = true
	return "new unwind tables", true
}

func (s *countingShedder) Restore() { s.restored++; s.givenUp = false }

// TestGuardShedsBeforeHalving: over the budget, the Guard first gives up
// the Shedder's work and keeps the rate; still over at the next window,
// it halves the rate; back under, the rate comes back first and then the
// work; each giving up and taking up is reported with its reason. With
// nothing to give up the Guard halves at once.
func TestGuardShedsBeforeHalving(t *testing.T) {
	sh := &countingShedder{}
	var reported []Shedding
	g := newTestGuard(t, 99, Config{MaxCPU: 1, Shedder: sh, OnShed: func(s Shedding) { reported = append(reported, s) }})
	shares := []float64{2, 2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 2}
	// The rate back first (98, then 99), the work three quiet windows at
	// the target later; over again: the work given up, the rate kept.
	want := []int{99, 49, 49, 49, 98, 98, 98, 99, 99, 99, 99, 99}
	var got []int
	var givenUp []bool
	for _, share := range shares {
		g.Observe(share)
		got = append(got, g.s.hz)
		givenUp = append(givenUp, sh.givenUp)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("frequencies %v, want %v", got, want)
	}
	// The work: given up at the first window over, back once the rate
	// was at the target for three quiet windows, given up again at the
	// next window over (the rate kept).
	if sh.shed != 2 || sh.restored != 1 || g.Sheds() != 2 || !g.Shedding() {
		t.Errorf("shed %d times, restored %d, Sheds() %d, Shedding() %v; want 2, 1, 2, true (given up: %v)",
			sh.shed, sh.restored, g.Sheds(), g.Shedding(), givenUp)
	}
	if len(reported) != 3 || reported[0].Restored || !reported[1].Restored || reported[2].Restored {
		t.Fatalf("reported %+v, want given up, restored, given up", reported)
	}
	ev := reported[0].Event()
	if ev.Labels[events.KindLabel] != events.KindOverheadGuard || ev.Labels["work"] != "new unwind tables" ||
		ev.Labels["shed"] != "given-up" || !strings.Contains(ev.Text, "over the 1% budget") {
		t.Errorf("event %+v: want the overhead-guard kind, the work, given-up and the reason", ev)
	}
	if ev := reported[1].Event(); ev.Labels["shed"] != "restored" || ev.Severity != events.Notice {
		t.Errorf("restored event %+v", ev)
	}

	none := newTestGuard(t, 99, Config{MaxCPU: 1, Shedder: &countingShedder{none: true}})
	none.Observe(2)
	if none.s.hz != 49 || none.Sheds() != 0 {
		t.Errorf("nothing to give up: %d Hz, %d sheds; want 49 Hz at once and none", none.s.hz, none.Sheds())
	}
}
