package query

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

const (
	period99 = int64(time.Second) / 99
	period49 = int64(time.Second) / 49
)

// rateChangeStore records a process that keeps CPU 0 busy for 40 s at
// 99 Hz, then, the rate halved as the overhead guard does, 40 s at 49 Hz,
// from a whole 10 s start. It returns the store, the start, the time of the
// change and the sum of the samples' periods.
func rateChangeStore(t *testing.T, dir string) (db *store.DB, start, change, cpuNs int64) {
	t.Helper()
	db, err := store.Open(dir, store.Options{Source: "host", PeriodNs: period99, BlockDuration: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start = time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	stack := []sample.Frame{{Function: "burn", Module: "/usr/bin/burn", Kind: sample.KindUser},
		{Function: "main", Module: "/usr/bin/burn", Kind: sample.KindUser}}
	burn := func(from, to, period int64) {
		for ts := from; ts < to; ts += period {
			s := sample.Sample{Time: ts / 1000 * 1000, CPU: 0, PID: 7, TID: 7, Comm: "burn", Stack: stack}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			cpuNs += period
		}
	}
	change = start + 40*int64(time.Second)
	burn(start, change, period99)
	db.SetPeriod(period49)
	burn(change, change+40*int64(time.Second), period49)
	return db, start, change, cpuNs
}

// within10 fails unless every value of after is within 10% of every value
// of before.
func within10(t *testing.T, what string, before, after []float64) {
	t.Helper()
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("%s: nothing to compare (%d before, %d after)", what, len(before), len(after))
	}
	for _, b := range before {
		for _, a := range after {
			if b <= 0 || math.Abs(a-b) > 0.1*b {
				t.Fatalf("%s: %v before the rate change, %v after: want within 10%%", what, before, after)
			}
		}
	}
}

// TestViewsAcrossARateChange checks that a steady burn looks the same
// before and after the sampling rate halves, in the heatmap, the timeline
// (scanned and from the block summaries) and the per-CPU view, while the
// sample counts halve; and that pprof's CPU time is the sum of the
// samples' own periods, a pinned process never more than 100% of a CPU.
func TestViewsAcrossARateChange(t *testing.T) {
	dir := t.TempDir()
	db, start, change, cpuNs := rateChangeStore(t, dir)
	ctx := context.Background()
	sec := int64(time.Second)
	for _, state := range []string{"heads and blocks", "blocks"} {
		if state == "blocks" {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			var err error
			if db, err = store.Open(dir, store.Options{ReadOnly: true}); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
		}
		r := store.Range{From: start, To: change + 40*sec}
		f := store.Filter{}

		h, _, err := HeatmapOf(ctx, db, r, &f, 10)
		if err != nil {
			t.Fatal(err)
		}
		if h.Unit != UnitCPUSeconds {
			t.Fatalf("heatmap unit %q", h.Unit)
		}
		// Whole columns away from the change (one column holds a second).
		colCPU := func(c int) float64 {
			var s float64
			for _, v := range h.CPU[c] {
				s += v
			}
			return s
		}
		colCount := func(c int) int {
			n := 0
			for _, v := range h.Values[c] {
				n += v
			}
			return n
		}
		var before, after []float64
		for c := 1; c < 39; c++ {
			before = append(before, colCPU(c))
			after = append(after, colCPU(c+40))
		}
		within10(t, state+": heatmap columns' CPU", before, after)
		if colCount(5) < 2*colCount(45)-3 {
			t.Fatalf("%s: %d samples a second before the change, %d after: the rate did not halve", state, colCount(5), colCount(45))
		}
		if math.Abs(colCPU(5)-1) > 0.03 {
			t.Fatalf("%s: a busy CPU's second shows %v CPU-seconds, want 1", state, colCPU(5))
		}

		for _, step := range []int64{sec, 10 * sec} { // scanned, and from the blocks' summaries
			tl, _, err := db.Timeline(ctx, r, step, &f)
			if err != nil {
				t.Fatal(err)
			}
			n := int(40 * sec / step)
			before, after = nil, nil
			for i := 1; i < n-1; i++ {
				before = append(before, float64(tl.CPUNs[i]))
				after = append(after, float64(tl.CPUNs[i+n]))
			}
			if step == 10*sec {
				before, after = []float64{float64(tl.CPUNs[1]), float64(tl.CPUNs[2])}, []float64{float64(tl.CPUNs[5]), float64(tl.CPUNs[6])}
			}
			within10(t, state+": timeline CPU, step "+time.Duration(step).String(), before, after)
		}

		pc, _, err := PerCPUOf(ctx, db, r, &f, sec)
		if err != nil {
			t.Fatal(err)
		}
		if len(pc.CPUs) != 1 || pc.Unit != UnitCPUSeconds {
			t.Fatalf("per-CPU: CPUs %v, unit %q", pc.CPUs, pc.Unit)
		}
		within10(t, state+": per-CPU", pc.CPU[0][1:39], pc.CPU[0][41:79])

		p, _, err := PprofOf(ctx, db, r, &f)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, s := range p.Sample {
			total += s.Value[1]
		}
		if total != cpuNs {
			t.Fatalf("%s: pprof CPU %d ns, the samples' periods add up to %d", state, total, cpuNs)
		}
		if share := float64(total) / float64(p.DurationNanos); share > 1.001 {
			t.Fatalf("%s: pprof says a process on one CPU took %.1f%% of it (%d ns in %d ns)", state, 100*share, total, p.DurationNanos)
		}
	}
}

// TestFlameGraphAndTopWeighPeriods checks that the flame graph and the top
// table give each sample its own period: 20 s of one function at 99 Hz,
// then 30 s of another at 49 Hz. The second has fewer samples (1470
// against 1980) but more CPU time (30 s against 20 s): it is the wider
// node and the top table's first row.
func TestFlameGraphAndTopWeighPeriods(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", PeriodNs: period99, BlockDuration: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	sec := int64(time.Second)
	burn := func(fn string, from, to, period int64) (n, cpuNs int64) {
		stack := []sample.Frame{{Function: fn, Module: "/usr/bin/burn", Kind: sample.KindUser},
			{Function: "main", Module: "/usr/bin/burn", Kind: sample.KindUser}}
		for ts := from; ts < to; ts += period {
			s := sample.Sample{Time: ts / 1000 * 1000, CPU: 0, PID: 7, TID: 7, Comm: "burn", Stack: stack}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			n++
			cpuNs += period
		}
		return n, cpuNs
	}
	nBefore, cpuBefore := burn("before", start, start+20*sec, period99)
	db.SetPeriod(period49)
	nAfter, cpuAfter := burn("after", start+20*sec, start+50*sec, period49)
	if nAfter >= nBefore {
		t.Fatalf("fixture: %d samples after, %d before: the counts must rank them the other way", nAfter, nBefore)
	}
	r := store.Range{From: start, To: start + 50*sec}
	ctx := context.Background()
	near := func(got float64, wantNs int64) bool { return math.Abs(got-float64(wantNs)/1e9) < 1e-6 }

	root, _, err := FlameGraphOf(ctx, db, r, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if !near(root.CPU, cpuBefore+cpuAfter) || root.Value != nBefore+nAfter {
		t.Fatalf("flame graph root: %v s in %d samples, want %v s in %d", root.CPU, root.Value, float64(cpuBefore+cpuAfter)/1e9, nBefore+nAfter)
	}
	node := map[string]*Node{}
	var walk func(n *Node)
	walk = func(n *Node) {
		node[n.Name] = n
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	b, a := node["before"], node["after"]
	if b == nil || a == nil || !near(b.CPU, cpuBefore) || !near(b.SelfCPU, cpuBefore) || !near(a.CPU, cpuAfter) || !near(a.SelfCPU, cpuAfter) {
		t.Fatalf("flame graph nodes: before %+v, after %+v; want %v s and %v s", b, a, float64(cpuBefore)/1e9, float64(cpuAfter)/1e9)
	}

	top, _, err := TopOf(ctx, db, r, &store.Filter{}, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if top.Unit != UnitCPUSeconds || !near(top.CPU, cpuBefore+cpuAfter) || len(top.Functions) != 3 {
		t.Fatalf("top: unit %q, %v s, %d functions", top.Unit, top.CPU, len(top.Functions))
	}
	// main is on every stack and leaf of none; then after, then before.
	if f := top.Functions[0]; f.Name != "after" || !near(f.SelfCPU, cpuAfter) || !near(f.TotalCPU, cpuAfter) || f.Self != nAfter {
		t.Fatalf("top's first row %+v, want after with %v s", f, float64(cpuAfter)/1e9)
	}
	if f := top.Functions[1]; f.Name != "before" || !near(f.SelfCPU, cpuBefore) {
		t.Fatalf("top's second row %+v, want before with %v s", f, float64(cpuBefore)/1e9)
	}
	if f := top.Functions[2]; f.Name != "main" || f.SelfCPU != 0 || !near(f.TotalCPU, cpuBefore+cpuAfter) {
		t.Fatalf("top's third row %+v, want main with %v s in total", f, float64(cpuBefore+cpuAfter)/1e9)
	}
}

// TestDiffAndGrowthAcrossARateChange compares 10 s of a steady burn after
// the sampling rate halved (A) with 10 s of it before (B): A holds half
// B's samples, but the same CPU time, so the differential flame graph
// (scaled by totals or by lengths) and the growth table show no change,
// where by counts the burn would have shrunk by half.
func TestDiffAndGrowthAcrossARateChange(t *testing.T) {
	db, start, change, _ := rateChangeStore(t, t.TempDir())
	ctx := context.Background()
	sec := int64(time.Second)
	a := store.Range{From: change + 10*sec, To: change + 20*sec}
	b := store.Range{From: start + 10*sec, To: start + 20*sec}
	f := store.Filter{}
	// within1 says whether ns is within 1% of a CPU-second (10 ms over
	// 10 s: a sample's period, the windows' edges).
	within1 := func(ns int64) bool { return math.Abs(float64(ns)) < 0.01*float64(sec) }
	for _, norm := range []Normalization{ByTotals, ByLength} {
		d, _, err := DiffOf(ctx, db, a, b, &f, norm, GroupAddresses)
		if err != nil {
			t.Fatal(err)
		}
		if d.SamplesB < 2*d.SamplesA-2 || !within1(d.TotalA-10*sec) || !within1(d.TotalB-10*sec) {
			t.Fatalf("normalization %d: A %d samples, %d ns; B %d samples, %d ns: want half the samples, 10 s each",
				norm, d.SamplesA, d.TotalA, d.SamplesB, d.TotalB)
		}
		var check func(n *DiffNode)
		check = func(n *DiffNode) {
			if !within1(n.DeltaTotal) || !within1(n.Delta) || !within1(n.A-n.B) {
				t.Fatalf("normalization %d, %s: A %d ns, B %d ns, change %d ns (self %d): a steady burn changed", norm, n.Name, n.A, n.B, n.DeltaTotal, n.Delta)
			}
			for _, c := range n.Children {
				check(c)
			}
		}
		check(d.Root)
	}

	g, _, err := GrowthOf(ctx, db, a, b, &f, ByTotal, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if g.Unit != UnitCPUSeconds || g.Samples2 < 2*g.Samples-2 || math.Abs(g.CPU-10) > 0.01 || math.Abs(g.CPU2-10) > 0.01 || len(g.Functions) != 2 {
		t.Fatalf("growth: %d samples, %v s in A; %d, %v s in B (unit %q); %d functions", g.Samples, g.CPU, g.Samples2, g.CPU2, g.Unit, len(g.Functions))
	}
	for _, fn := range g.Functions {
		if fn.Total2 < 2*fn.Total-2 || math.Abs(fn.TotalCPU-fn.TotalCPU2) > 0.01 || math.Abs(fn.DeltaTotalCPU) > 0.01 || math.Abs(fn.DeltaSelfCPU) > 0.01 {
			t.Fatalf("%s: %d samples, %v s in A; %d, %v s in B; grew %v s (self %v s): a steady burn grew or shrank",
				fn.Name, fn.Total, fn.TotalCPU, fn.Total2, fn.TotalCPU2, fn.DeltaTotalCPU, fn.DeltaSelfCPU)
		}
	}
}

// TestFineViewsSpreadThePeriod looks at the steady burn at 49 Hz (a
// sample every 20.4 ms) through 20 ms heatmap cells and 10 ms per-CPU and
// timeline steps, finer than the period: every cell and step of the burn shows its
// CPU busy for its whole length, never more (whole periods in the cells
// holding a sample made some 102% busy, and those between idle).
func TestFineViewsSpreadThePeriod(t *testing.T) {
	db, _, change, _ := rateChangeStore(t, t.TempDir())
	ctx := context.Background()
	sec := int64(time.Second)
	r := store.Range{From: change + 10*sec, To: change + 12*sec}
	f := store.Filter{}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-3*want {
			t.Fatalf("%s: %v s of CPU time, want %v (the CPU was busy throughout)", what, got, want)
		}
	}
	h, _, err := HeatmapOf(ctx, db, r, &f, 50)
	if err != nil {
		t.Fatal(err)
	}
	for c := range h.CPU {
		for row, v := range h.CPU[c] {
			near(fmt.Sprintf("heatmap cell %d,%d", c, row), v, 0.02)
		}
	}
	if h.MaxCPU > 0.02*1.001 {
		t.Fatalf("heatmap: busiest cell %v s, longer than its 20 ms", h.MaxCPU)
	}
	pc, _, err := PerCPUOf(ctx, db, r, &f, 10*int64(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range pc.CPU[0] {
		near(fmt.Sprintf("per-CPU step %d", i), v, 0.01)
	}
	tl, _, err := db.Timeline(ctx, r, 10*int64(time.Millisecond), &f)
	if err != nil {
		t.Fatal(err)
	}
	for i, ns := range tl.CPUNs {
		near(fmt.Sprintf("timeline step %d", i), seconds(ns), 0.01)
	}
}

// TestFineViewsJitter: a CPU's samples come 2 ms early and late by turns
// (timer jitter), so that their periods overlap: no 10 ms per-CPU step and
// no 20 ms heatmap cell holds more than its length of the one busy CPU
// (each sample's time starts no earlier than the CPU's previous sample),
// and what they hold in all is each sample's period, cut to the time since
// the previous one.
func TestFineViewsJitter(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", PeriodNs: period49, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sec := int64(time.Second)
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	stack := []sample.Frame{{Function: "burn", Kind: sample.KindUser}}
	n := int64(0)
	for ts := start + period49; ts < start+2*sec; ts += period49 {
		s := sample.Sample{Time: ts + n%2*2*int64(time.Millisecond), PID: 7, TID: 7, Comm: "burn", Stack: stack}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		n++
	}
	r := store.Range{From: start, To: start + 3*sec}
	ctx := context.Background()
	pc, _, err := PerCPUOf(ctx, db, r, &store.Filter{}, 10*int64(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for i, v := range pc.CPU[0] {
		if v > 0.01+1e-12 {
			t.Fatalf("per-CPU step %d: %v s of CPU time in 10 ms", i, v)
		}
		total += v
	}
	h, _, err := HeatmapOf(ctx, db, r, &store.Filter{}, 50)
	if err != nil {
		t.Fatal(err)
	}
	if h.MaxCPU > 0.02+1e-12 {
		t.Fatalf("heatmap: a 20 ms cell holds %v s of one CPU", h.MaxCPU)
	}
	// Each sample stands for its period, but no more than the time since
	// the previous one.
	var wantNs int64
	for k := range n {
		gap := period49
		if k > 0 {
			gap = period49 + (k%2-(k-1)%2)*2*int64(time.Millisecond)
		}
		wantNs += min(period49, gap)
	}
	if want := seconds(wantNs); math.Abs(total-want) > 1e-6*float64(n) { // the store keeps microseconds
		t.Fatalf("per-CPU: %v s of CPU time in all, want %v", total, want)
	}
}
