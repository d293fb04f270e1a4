package store

import (
	"context"
	"errors"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// dutyNode records into a new data directory as node: per CPU, a thread
// (comm "t<cpu>") busy share[cpu] of every 100 ms, idle samples the rest,
// sampled every period from start for seconds.
func dutyNode(t *testing.T, node string, labels map[string]string, start, seconds, period int64, share []float64) string {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: node, Node: node, NodeLabels: labels, PeriodNs: period, BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hot := []sample.Frame{{Function: "spin", Module: "/bin/spin", Kind: sample.KindUser}}
	idle := []sample.Frame{{Function: "default_idle", Module: "[kernel.kallsyms]", Kind: sample.KindKernel}}
	end := start + seconds*int64(time.Second)
	for ts := start; ts < end; ts += period {
		for cpu, sh := range share {
			s := sample.Sample{Time: ts / 1000 * 1000, CPU: uint32(cpu), Comm: "swapper/" + string(rune('0'+cpu)), Stack: idle}
			if float64((ts-start)%int64(100*time.Millisecond)) < sh*float64(100*time.Millisecond) {
				s = sample.Sample{Time: ts / 1000 * 1000, CPU: uint32(cpu), PID: 100, TID: uint32(100 + cpu),
					Comm: "t" + string(rune('0'+cpu)), Stack: hot}
			}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestNodeCPUSteps: the busiest CPU's share and the total per node and
// step, from the per-CPU summaries, equal a scan of the samples, with
// thread, CPU and node-label filters, and each sample weighs its period.
func TestNodeCPUSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	const ms = int64(time.Millisecond)
	// node-a: one CPU saturated, one 10% busy, at 100 Hz; node-b: four
	// CPUs 40% busy, at 50 Hz.
	a := dutyNode(t, "node-a", map[string]string{"zone": "z1"}, start, 60, 10*ms, []float64{1, 0.1})
	b := dutyNode(t, "node-b", map[string]string{"zone": "z2"}, start, 60, 20*ms, []float64{0.4, 0.4, 0.4, 0.4})
	db, err := OpenReader([]BlockSource{DirSource(a), DirSource(b)}, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	step := int64(10 * time.Second)
	r := Range{From: start, To: start + 60*int64(time.Second)}
	got, warnings, err := db.NodeCPUSteps(ctx, r, step, &Filter{}, nil)
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
		f    Filter
	}{
		{"all", Filter{}},
		{"idle too", Filter{IncludeIdle: true}},
		{"command", Filter{Comm: "t1"}},
		{"cpu", Filter{CPUs: []uint32{1, 3}}},
		{"label", Filter{NodeLabels: []Label{{"zone", "z2"}}}},
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
		odd, _, err := db.NodeCPUSteps(ctx, Range{From: r.From, To: r.To - int64(time.Second)}, step, &c.f, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sum {
			if !nearNodeCPU(sum[i], scan[i], map[string]int64{"node-a": 10 * ms, "node-b": 20 * ms}[sum[i].Node], 4) {
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
	if _, _, err := db.NodeCPUSteps(ctx, r, 0, &Filter{}, nil); err == nil {
		t.Error("step 0 accepted")
	}
	if _, _, err := db.NodeCPUSteps(ctx, Range{From: 0, To: 1 << 62}, 1, &Filter{}, nil); err == nil {
		t.Error("10^18 steps accepted")
	}
}

func sameNodeCPU(a, b NodeCPU) bool {
	return a.Node == b.Node && slices.Equal(a.BusiestNs, b.BusiestNs) && slices.Equal(a.TotalNs, b.TotalNs) &&
		slices.Equal(a.Samples, b.Samples) && slices.Equal(a.CoveredNs, b.CoveredNs)
}

// nearNodeCPU reports whether a and b have the same samples and covered
// time in every step, and CPU times within a period a CPU (of cpus).
func nearNodeCPU(a, b NodeCPU, period int64, cpus int64) bool {
	near := func(x, y []int64, within int64) bool {
		return slices.EqualFunc(x, y, func(p, q int64) bool { return max(p-q, q-p) <= within })
	}
	return a.Node == b.Node && slices.Equal(a.Samples, b.Samples) && slices.Equal(a.CoveredNs, b.CoveredNs) &&
		near(a.BusiestNs, b.BusiestNs, period) && near(a.TotalNs, b.TotalNs, cpus*period)
}

// TestNodeCPUStepsOfOlderBlocks: blocks of format versions 1 and 2 have
// no per-CPU summary; they are scanned, each sample's period spread over
// the time before it as /api/percpu does.
func TestNodeCPUStepsOfOlderBlocks(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		dir := t.TempDir()
		copyDir(t, "testdata/"+v, dir)
		db, err := Open(dir, Options{Source: "host", ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		r := Range{From: 1_700_000_000_000_000_000, To: 1_700_000_010_000_000_000}
		got, warnings, err := db.NodeCPUSteps(context.Background(), r, int64(10*time.Second), &Filter{IncludeIdle: true}, nil)
		if err != nil || len(warnings) > 0 || len(got) != 1 {
			t.Fatalf("%s: %+v %v %v", v, got, warnings, err)
		}
		perCPU := map[uint32]int64{}
		var n int64
		var last LastSample
		db.Select(context.Background(), r, &Filter{IncludeIdle: true}, func(b *Batch) error {
			for _, i := range b.Rows {
				t, cpu := b.T.Time[i], b.T.CPU[i]
				perCPU[cpu] += min(t, r.To) - max(Since(t, b.Weight(), last.Swap(cpu, t)), r.From)
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

// TestCPUSummaryOfSynthBlocks: the per-CPU summary of a block, summed
// over CPUs, is its per-thread summary summed over threads.
func TestCPUSummaryOfSynthBlocks(t *testing.T) {
	dir, _ := nodeDir(t, "n", nil, synth.Config{CPUs: 4, Hz: 99, Start: 1e18, Seconds: 30, Seed: 3, Containers: true})
	db, err := Open(dir, Options{Source: "n", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, b := range db.blocks {
		ix, err := db.blockIndex(b)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := readSection(b.data, b.sections[sectionCPUSummary], b.tocOffset)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := decodeSummary(raw, "cpu summary", maxSummaryCPU)
		if err != nil || len(cs.cells) == 0 {
			t.Fatalf("block %s: per-CPU summary %+v: %v", b, cs, err)
		}
		perCPU, perThread := map[int64][2]uint32{}, map[int64][2]uint32{}
		for _, c := range cs.cells {
			v := perCPU[cs.base+int64(c.bucket)]
			perCPU[cs.base+int64(c.bucket)] = [2]uint32{v[0] + c.count, v[1] + c.idle}
		}
		for _, c := range ix.summary.cells {
			v := perThread[ix.summary.base+int64(c.bucket)]
			perThread[ix.summary.base+int64(c.bucket)] = [2]uint32{v[0] + c.count, v[1] + c.idle}
		}
		if len(perCPU) != len(perThread) {
			t.Fatalf("%d buckets per CPU, %d per thread", len(perCPU), len(perThread))
		}
		for k, v := range perThread {
			if perCPU[k] != v {
				t.Errorf("bucket %d: per CPU %v, per thread %v", k, perCPU[k], v)
			}
		}
	}
}

func FuzzDecodeCPUSummary(f *testing.F) {
	f.Add(encodeSummary([]summaryEntry{{bucket: 170_000_000, key: 3, count: 990, idle: 10}, {bucket: 170_000_001, key: 0, count: 5, idle: 5}}))
	f.Add(encodeSummary(nil))
	f.Add(encodeSummary([]summaryEntry{{bucket: 0, key: 0, count: 1}, {bucket: 5, key: 0, count: 1}, {bucket: 3, key: 1, count: 1}}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := decodeSummary(raw, "cpu summary", maxSummaryCPU)
		if err != nil {
			return
		}
		for i, c := range s.cells {
			if c.key >= maxSummaryCPU || c.idle > c.count {
				t.Fatalf("decoded an out-of-range cell %+v", c)
			}
			if i > 0 && c.bucket < s.cells[i-1].bucket {
				t.Fatalf("decoded cell %d's bucket %d before the previous one's %d", i, c.bucket, s.cells[i-1].bucket)
			}
		}
	})
}

// TestDecodeSummaryRejectsBucketsGoingBack: a summary whose buckets rise
// then fall (0, 5, 3) is a corrupt block, not entries that readers such as
// ReadCPUSteps, which take the first and last entries for the lowest and
// highest buckets, would index past their counts with.
func TestDecodeSummaryRejectsBucketsGoingBack(t *testing.T) {
	back := encodeSummary([]summaryEntry{{bucket: 100, key: 0, count: 1}, {bucket: 105, key: 1, count: 2}, {bucket: 103, key: 0, count: 3}})
	for _, what := range []string{"cpu summary", "summary"} {
		_, err := decodeSummary(back, what, maxSummaryCPU)
		if !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), what+" entry 2's bucket is before the previous entry's") {
			t.Errorf("%s with buckets 100, 105, 103: %v, want a corrupt-block error naming entry 2", what, err)
		}
	}
	// Equal buckets (several keys in one 10 s) are fine.
	same := encodeSummary([]summaryEntry{{bucket: 100, key: 0, count: 1}, {bucket: 100, key: 1, count: 2}, {bucket: 101, key: 0, count: 3}})
	if s, err := decodeSummary(same, "cpu summary", maxSummaryCPU); err != nil || len(s.cells) != 3 || s.cells[2].bucket != 1 {
		t.Errorf("buckets 100, 100, 101: %+v, %v", s, err)
	}
}

// TestTimelineKeepsItsCPUSteps: a timeline of every thread cuts its steps
// by the CPUs' time from the blocks' per-CPU summaries, read once and kept
// by the Reader (the overview keeps its own): the same timeline again
// reads none, another step reads them again, and NodeCPUSteps without a
// cache reads them every time. ReadCPUSteps refuses a block of a format
// without a per-CPU summary.
func TestTimelineKeepsItsCPUSteps(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	dir := dutyNode(t, "node-a", nil, start, 60, int64(10*time.Millisecond), []float64{1, 0.1})
	db, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	blocks := uint64(db.Stats().Blocks)
	r := Range{From: start, To: start + 60*int64(time.Second)}
	reads := func() uint64 { return db.Stats().CPUSummaryReads }
	for i, c := range []struct {
		step int64
		want uint64
	}{{int64(20 * time.Second), blocks}, {int64(20 * time.Second), blocks}, {int64(30 * time.Second), 2 * blocks}} {
		if _, _, err := db.Timeline(ctx, r, c.step, &Filter{}); err != nil {
			t.Fatal(err)
		}
		if reads() != c.want || blocks < 2 {
			t.Errorf("timeline %d (%v steps): %d per-CPU summaries read of %d blocks, want %d", i, time.Duration(c.step), reads(), blocks, c.want)
		}
	}
	before := reads()
	for range 2 {
		if _, _, err := db.NodeCPUSteps(ctx, r, int64(30*time.Second), &Filter{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if more := reads() - before; more != 2*blocks {
		t.Errorf("NodeCPUSteps without a cache, twice: %d summaries read, want %d", more, 2*blocks)
	}

	old := t.TempDir()
	copyDir(t, "testdata/v2", old)
	v2, err := Open(old, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	if bs := v2.CPUSummaryBlocks(); len(bs) != 0 {
		t.Errorf("a store of version 2 blocks lists %d with a per-CPU summary", len(bs))
	}
	b := v2.blocks[0]
	if _, err := v2.ReadCPUSteps(b, int64(10*time.Second), 0, false, Range{From: math.MinInt64, To: math.MaxInt64}); err == nil {
		t.Error("ReadCPUSteps of a version 2 block: no error")
	}
}
