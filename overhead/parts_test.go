package overhead

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
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
	// Past start-up (StartupWindows), which evidence_test.go tests.
	g := newTestGuard(t, 99, Config{MaxCPU: 1, Shedder: sh, StartupWindows: -1, OnKept: func(k Kept) { kept = append(kept, k) }})
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
	// 0.5 of which 0.1 the samples' part at 24 Hz: under 0.9 of the
	// budget up to 24*(0.9-0.4)/0.1 = 120 Hz, at most doubling: 48 Hz,
	// where the whole cost scaled under 0.6 would have allowed
	// 24*0.6/0.5 = 28.
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
		{Cost{Share: 1.4, Parts: []PartShare{{"samples", 0.5, true}, {"new processes", 0.6, false}, {"symbol tables", 0.2, false}}}, 0.1, true,
			"0.9 does not fall with the rate (the rest with it): what is left of the budget, 0.1, fits at a fifth of the rate"},
		{Cost{Share: 1.6, Parts: []PartShare{{"samples", 0.3, true}, {"new processes", 0.9, false}, {"symbol tables", 0.2, false}}}, 0.2, false,
			"1.1 does not fall with the rate, over the budget alone and most of the cost"},
		{Cost{Share: 2.4, Parts: []PartShare{{"samples", 1.3, true}, {"new processes", 1.1, false}}}, 0, true,
			"no rate fits, but the samples' part is most of the cost"},
		{Cost{Share: 4.691, Parts: []PartShare{{"samples", 1.459, true}, {"BPF sampler", 0.696, true}, {"the store", 0.025, true}, {"new processes", 0.505, false},
			{"symbol tables", 0.090, false}, {"unwind tables", 0.025, false}}}, 1.891, true,
			"no rate fits and the rest is the largest part (cmd's TestOverheadGuard at 400 Hz), but what falls with the rate is over the budget alone"},
		{Cost{Share: 1.243, Parts: []PartShare{{"samples", 0.173, true}, {"BPF sampler", 0.056, true}, {"the store", 0.038, true}, {"new processes", 0.093, false},
			{"symbol tables", 0.222, false}, {"unwind tables", 0.231, false}}}, 0.430, false,
			"case b at load 16-34, taken as at 100 Hz: it would fit at 8 Hz, under the 10 Hz floor (at its 24 Hz, at 2 Hz): no cut can bring it within"},
	} {
		if got := c.cost.rateBound(100, 10, 1); got != c.want || math.Abs(c.cost.rest()-c.rest) > 1e-9 {
			t.Errorf("%+v: rate-bound %v, rest %v; want %v, %v (%s)", c.cost, got, c.cost.rest(), c.want, c.rest, c.why)
		}
	}
	if c := (Cost{Share: 2}); !c.rateBound(100, 10, 1) || c.split() != "" || c.largest() != "samples" {
		t.Errorf("a cost without parts: rate-bound %v, split %q, largest %q; want true, \"\", samples", c.rateBound(100, 10, 1), c.split(), c.largest())
	}
}

// burstyAgent is an agent whose samples cost 0.5% of a CPU, and whose
// store writes a block in one burst of 20 ms at burstAt, serving the
// 10 s after it.
type burstyAgent struct {
	start   time.Time
	burstAt time.Duration
	spreads bool
}

const (
	burstCPU    = 20 * time.Millisecond
	burstServes = 10 * time.Second
)

func (a *burstyAgent) at() (samples, burst, spread time.Duration) {
	el := time.Since(a.start)
	samples = time.Duration(0.005 * float64(el))
	if since := el - a.burstAt; since >= 0 {
		burst = burstCPU
		spread = time.Duration(float64(burstCPU) * min(1, float64(since)/float64(burstServes)))
	}
	return samples, burst, spread
}

func (a *burstyAgent) meter() (time.Duration, error) {
	samples, burst, _ := a.at()
	return samples + burst, nil
}

func (a *burstyAgent) parts() []Part {
	samples, burst, spread := a.at()
	return []Part{{Name: "samples", CPU: samples, PerSample: true}, {Name: "the store", CPU: burst, PerSample: true, Spreads: a.spreads, Spread: spread}}
}

// TestGuardJudgesBurstsSpread: a block written in a 20 ms burst, in a
// 100 ms window, is 20% of a CPU there; spread over the 10 s it serves it
// is 0.2%. Judged spread (Part.Spreads) the rate stays; judged as it fell
// (the check that the test can fail), the Guard halves it.
func TestGuardJudgesBurstsSpread(t *testing.T) {
	for _, spreads := range []bool{true, false} {
		a := &burstyAgent{start: time.Now(), burstAt: 350 * time.Millisecond, spreads: spreads}
		s := &fixedSampler{hz: 99}
		var log bytes.Buffer
		// Past start-up (StartupWindows), and no raise after the cut
		// within the second this runs.
		g, err := New(Config{MaxCPU: 1, Window: 100 * time.Millisecond, Warmup: time.Millisecond, Parts: a.parts, StartupWindows: -1, RaiseAfter: 100,
			Logger: slog.New(slog.NewTextHandler(&log, nil))}, s, a.meter)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		g.Run(ctx)
		cancel()
		switch {
		case spreads && s.hz != 99:
			t.Errorf("judged spread: %d Hz, want 99; log:\n%s", s.hz, log.String())
		case !spreads && s.hz == 99:
			t.Errorf("judged as it fell: 99 Hz, want the rate halved (the test's burst must be over the budget); log:\n%s", log.String())
		case !spreads:
			m := regexp.MustCompile(`from_hz=99 to_hz=49 reason="[^"]*the store (\d+\.\d+)%`).FindStringSubmatch(log.String())
			share := 0.0
			if m != nil {
				share, _ = strconv.ParseFloat(m[1], 64)
			}
			if share < 5 {
				t.Errorf("the halving's reason does not name the store's burst at its share of the window; log:\n%s", log.String())
			}
		}
	}
}

// tablingAgent is an agent whose samples cost 0.5% of a CPU and which
// builds unwind tables (a part done once and kept): one of oneOffCPU at
// oneOffAt, and from then on sustained of one CPU, if not zero.
type tablingAgent struct {
	start     time.Time
	oneOffAt  time.Duration
	oneOffCPU time.Duration
	sustained float64
	oneOff    bool // the part is marked OneOff
}

func (a *tablingAgent) at() (samples, tables time.Duration) {
	el := time.Since(a.start)
	samples = time.Duration(0.005 * float64(el))
	if since := el - a.oneOffAt; since >= 0 {
		tables = a.oneOffCPU + time.Duration(a.sustained*float64(since))
	}
	return samples, tables
}

func (a *tablingAgent) meter() (time.Duration, error) {
	samples, tables := a.at()
	return samples + tables, nil
}

func (a *tablingAgent) parts() []Part {
	samples, tables := a.at()
	return []Part{{Name: "samples", CPU: samples, PerSample: true}, {Name: "unwind tables", CPU: tables, OneOff: a.oneOff}}
}

// runTabling runs a Guard with a Shedder over a for d, windows of 100 ms,
// and returns its sampler, Shedder and log.
func runTabling(t *testing.T, a *tablingAgent, spread, d time.Duration) (*fixedSampler, *countingShedder, string) {
	t.Helper()
	s, sh := &fixedSampler{hz: 99}, &countingShedder{}
	var log bytes.Buffer
	g, err := New(Config{MaxCPU: 1, Window: 100 * time.Millisecond, Warmup: time.Millisecond, Parts: a.parts, Shedder: sh, OneOffSpread: spread,
		StartupWindows: -1, Logger: slog.New(slog.NewTextHandler(&log, nil))}, s, a.meter)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	g.Run(ctx)
	return s, sh, log.String()
}

// TestGuardJudgesOneOffWorkSpread: a table compiled once in 20 ms, in a
// 100 ms window where the samples cost 0.5% of a CPU, makes it 20.5% (a
// late tick's window of 1 s still 2.5%); judged spread over the 20 s it
// is kept for (Part.OneOff) it is 0.1%:
// the Guard neither gives up work nor lowers the rate. Judged as it fell
// (the check that the test can fail) it gives up the young processes'
// tables. Tables built on and on at 2% of a CPU are over the budget
// however they are judged: spread over 200 ms, the Guard gives up work
// and then, over the budget with work a lower rate does not reduce,
// keeps the rate and says the tables cost it.
func TestGuardJudgesOneOffWorkSpread(t *testing.T) {
	for _, oneOff := range []bool{true, false} {
		a := &tablingAgent{start: time.Now(), oneOffAt: 350 * time.Millisecond, oneOffCPU: 20 * time.Millisecond, oneOff: oneOff}
		s, sh, log := runTabling(t, a, 20*time.Second, time.Second)
		switch {
		case oneOff && (s.hz != 99 || sh.shed != 0):
			t.Errorf("one table judged spread: %d Hz, work given up %d times; want 99 Hz and none; log:\n%s", s.hz, sh.shed, log)
		case !oneOff && sh.shed == 0:
			t.Errorf("one table judged as it fell: no work given up, want it given up (the test's table must be over the budget in its window); log:\n%s", log)
		}
	}
	a := &tablingAgent{start: time.Now(), oneOffAt: 50 * time.Millisecond, sustained: 0.02, oneOff: true}
	_, sh, log := runTabling(t, a, 200*time.Millisecond, 1200*time.Millisecond)
	if sh.shed != 1 {
		t.Fatalf("tables built on and on at 2%% of a CPU: work given up %d times, want once; log:\n%s", sh.shed, log)
	}
	// Over the budget alone, a lower rate would not help: the rate is
	// kept, and said to be, naming the tables.
	m := regexp.MustCompile(`the rate stays" hz=99 reason="[^"]*unwind tables (\d+\.\d+)%`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the Guard did not say that the unwind tables kept it over the budget; log:\n%s", log)
	}
	if share, _ := strconv.ParseFloat(m[1], 64); share < 1 {
		t.Errorf("the tables at %.3f%% of a CPU where the rate was kept, want over 1%% (2%% spread over 200 ms, built on for longer)", share)
	}
}
