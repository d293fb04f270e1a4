package store_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/store"
)

// TestNodeCPUSteps: the busiest CPU's share and the total per node and
// step, from the per-CPU summaries, equal a scan of the samples, with
// thread, CPU and node-label filters, and each sample weighs its period.
func TestNodeCPUSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	const ms = int64(time.Millisecond)
	// node-a: one CPU saturated, one 10% busy, at 100 Hz; node-b: four
	// CPUs 40% busy, at 50 Hz.
	a := storetest.DutyNode(t, "node-a", map[string]string{"zone": "z1"}, start, 60, 10*ms, []float64{1, 0.1})
	b := storetest.DutyNode(t, "node-b", map[string]string{"zone": "z2"}, start, 60, 20*ms, []float64{0.4, 0.4, 0.4, 0.4})
	db, err := store.OpenReader([]store.BlockSource{store.DirSource(a), store.DirSource(b)}, store.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	step := int64(10 * time.Second)
	r := store.Range{From: start, To: start + 60*int64(time.Second)}
	got, warnings, err := db.NodeCPUSteps(ctx, r, step, &store.Filter{}, nil)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("NodeCPUSteps: %v %v", err, warnings)
	}
	if len(got) != 2 || got[0].Node != "node-a" || got[1].Node != "node-b" || got[1].Labels["zone"] != "z2" {
		t.Fatalf("nodes %+v", got)
	}
	for s := range 6 {
		// The data cover every step whole but the last, which ends at
		// the last sample, a period before the range's end.
		for i, period := range []int64{10 * ms, 20 * ms} {
			if want := step - period*int64(s/5); got[i].CoveredNs[s] != want {
				t.Errorf("%s step %d: %d ns covered, want %d", got[i].Node, s, got[i].CoveredNs[s], want)
			}
		}
		// node-a: CPU 0 busy all the time the data cover (10 s of CPU
		// time in 10 s; in the last step, cut short by the data's end,
		// its 1000 samples of 10 ms are cut at the 9.99 s covered), CPU
		// 1 a tenth.
		if ga := got[0]; ga.BusiestNs[s] != ga.CoveredNs[s] || ga.BusiestCPU[s] != 0 || ga.TotalNs[s] != ga.CoveredNs[s]+step/10 {
			t.Errorf("node-a step %d: busiest %d ns on CPU %d, total %d; want %d on 0, %d", s, ga.BusiestNs[s], ga.BusiestCPU[s], ga.TotalNs[s],
				ga.CoveredNs[s], ga.CoveredNs[s]+step/10)
		}
		// node-b: every CPU 40% busy, its samples weighing 20 ms.
		if gb := got[1]; gb.BusiestNs[s] != step*4/10 || gb.TotalNs[s] != step*16/10 || gb.Samples[s] != 4*200 {
			t.Errorf("node-b step %d: busiest %d ns, total %d, %d samples; want %d, %d, 800", s, gb.BusiestNs[s], gb.TotalNs[s], gb.Samples[s], step*4/10, step*16/10)
		}
	}

	// Every filter, answered by summaries where they can, equals a scan
	// (a frame filter that keeps every sample forces one) within a
	// period a CPU: a summary gives each sample whole to its 10 s, a scan
	// spreads its period over the time before it.
	any := regexp.MustCompile(".")
	for _, c := range []struct {
		name string
		f    store.Filter
	}{
		{"all", store.Filter{}},
		{"idle too", store.Filter{IncludeIdle: true}},
		{"command", store.Filter{Comm: "t1"}},
		{"cpu", store.Filter{CPUs: []uint32{1, 3}}},
		{"label", store.Filter{NodeLabels: []store.Label{{"zone", "z2"}}}},
	} {
		sum, _, err := db.NodeCPUSteps(ctx, r, step, &c.f, nil)
		if err != nil {
			t.Fatal(err)
		}
		scanF := c.f
		scanF.Frame = any
		scan, _, err := db.NodeCPUSteps(ctx, r, step, &scanF, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A 1 s-aligned range that is not a multiple of 10 s scans too.
		odd, _, err := db.NodeCPUSteps(ctx, store.Range{From: r.From, To: r.To - int64(time.Second)}, step, &c.f, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sum {
			if !storetest.NearNodeCPU(sum[i], scan[i], map[string]int64{"node-a": 10 * ms, "node-b": 20 * ms}[sum[i].Node], 4) {
				t.Errorf("%s: summary %+v\nscan %+v", c.name, sum[i], scan[i])
			}
			if !slices.Equal(scan[i].BusiestNs[:5], odd[i].BusiestNs[:5]) {
				t.Errorf("%s: unaligned range %v, want %v", c.name, odd[i].BusiestNs, scan[i].BusiestNs)
			}
		}
		if c.name == "command" && (sum[0].BusiestNs[0] != step/10 || sum[0].BusiestCPU[0] != 1 || sum[1].TotalNs[0] != step*4/10) {
			t.Errorf("comm t1: %+v", sum)
		}
		if c.name == "label" && (len(sum) != 1 || sum[0].Node != "node-b") {
			t.Errorf("label zone=z2: %+v", sum)
		}
	}

	// Bad arguments.
	if _, _, err := db.NodeCPUSteps(ctx, r, 0, &store.Filter{}, nil); err == nil {
		t.Error("step 0 accepted")
	}
	if _, _, err := db.NodeCPUSteps(ctx, store.Range{From: 0, To: 1 << 62}, 1, &store.Filter{}, nil); err == nil {
		t.Error("10^18 steps accepted")
	}
}

// TestNodeCPUStepsOfOlderBlocks: blocks of format versions 1 and 2 have
// no per-CPU summary; they are scanned, each sample's period spread over
// the time before it as /api/percpu does.
func TestNodeCPUStepsOfOlderBlocks(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS("testdata/"+v)); err != nil {
			t.Fatal(err)
		}
		db, err := store.Open(dir, store.Options{Source: "host", ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		r := store.Range{From: 1_700_000_000_000_000_000, To: 1_700_000_010_000_000_000}
		got, warnings, err := db.NodeCPUSteps(context.Background(), r, int64(10*time.Second), &store.Filter{IncludeIdle: true}, nil)
		if err != nil || len(warnings) > 0 || len(got) != 1 {
			t.Fatalf("%s: %+v %v %v", v, got, warnings, err)
		}
		perCPU := map[uint32]int64{}
		var n int64
		var last store.LastSample
		db.Select(context.Background(), r, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
			for _, i := range b.Rows {
				t, cpu := b.T.Time[i], b.T.CPU[i]
				perCPU[cpu] += min(t, r.To) - max(store.Since(t, b.Weight(), last.Swap(cpu, t)), r.From)
				n++
			}
			return nil
		})
		var busiest, total int64
		for _, ns := range perCPU {
			busiest, total = max(busiest, ns), total+ns
		}
		if n == 0 || got[0].Samples[0] != n || got[0].BusiestNs[0] != busiest || got[0].TotalNs[0] != total {
			t.Errorf("%s: %+v, want %d samples, busiest %d, total %d", v, got[0], n, busiest, total)
		}
		db.Close()
	}
}

// TestTimelineKeepsItsCPUSteps: a timeline of every thread cuts its steps
// by the CPUs' time from the blocks' per-CPU summaries, read once and kept
// by the Reader (in its own cache: none given by KeepStepsIn; overview's
// TestTimelinesShareTheStepBudget checks one given): the same timeline again
// reads none, another step reads them again, and NodeCPUSteps without a
// cache reads them every time.
func TestTimelineKeepsItsCPUSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := storetest.DutyNode(t, "node-a", nil, start, 60, int64(10*time.Millisecond), []float64{1, 0.1})
	db, err := store.Open(dir, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	blocks := uint64(db.Stats().Blocks)
	r := store.Range{From: start, To: start + 60*int64(time.Second)}
	reads := func() uint64 { return db.Stats().CPUSummaryReads }
	for i, c := range []struct {
		step int64
		want uint64
	}{{int64(20 * time.Second), blocks}, {int64(20 * time.Second), blocks}, {int64(30 * time.Second), 2 * blocks}} {
		if _, _, err := db.Timeline(ctx, r, c.step, &store.Filter{}); err != nil {
			t.Fatal(err)
		}
		if reads() != c.want || blocks < 2 {
			t.Errorf("timeline %d (%v steps): %d per-CPU summaries read of %d blocks, want %d", i, time.Duration(c.step), reads(), blocks, c.want)
		}
	}
	before := reads()
	for range 2 {
		if _, _, err := db.NodeCPUSteps(ctx, r, int64(30*time.Second), &store.Filter{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if more := reads() - before; more != 2*blocks {
		t.Errorf("NodeCPUSteps without a cache, twice: %d summaries read, want %d", more, 2*blocks)
	}
}
