package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// rateChangeStore records a process, burn, that keeps CPU 0 busy from
// base, 30 s at 99 Hz then 30 s at 49 Hz (the overhead guard's halving),
// and with spike another, spike, busy on CPU 1 from base+42 to base+44
// (at 49 Hz). It returns the store and the sum of the samples' periods.
func rateChangeStore(t *testing.T, spike bool) (*store.DB, int64) {
	t.Helper()
	p99, p49 := int64(time.Second)/99, int64(time.Second)/49
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", PeriodNs: p99, BlockDuration: 20 * time.Second, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sec := int64(time.Second)
	start := int64(base) * sec
	change := start + 30*sec
	var cpuNs int64
	var batch []sample.Sample
	run := func(comm string, pid, cpu uint32, from, to, period int64) {
		stack := []sample.Frame{{Function: comm + "_fn", Module: "/usr/bin/" + comm, Kind: sample.KindUser}, {Function: "main", Module: "/usr/bin/" + comm, Kind: sample.KindUser}}
		for ts := from; ts < to; ts += period {
			batch = append(batch, sample.Sample{Time: ts / 1000 * 1000, CPU: cpu, PID: pid, TID: pid, Comm: comm, Stack: stack})
			cpuNs += period
		}
	}
	// flush appends the batch in time order.
	flush := func() {
		slices.SortStableFunc(batch, func(a, b sample.Sample) int { return cmp.Compare(a.Time, b.Time) })
		for i := range batch {
			if err := db.Append(&batch[i]); err != nil {
				t.Fatal(err)
			}
		}
		batch = batch[:0]
	}
	run("burn", 7, 0, start, change, p99)
	flush()
	db.SetPeriod(p49)
	run("burn", 7, 0, change, change+30*sec, p49)
	if spike {
		run("spike", 8, 1, start+42*sec, start+44*sec, p49)
	}
	flush()
	return db, cpuNs
}

// TestAPIAcrossARateChange records a process that keeps CPU 0 busy, 30 s
// at 99 Hz then 30 s at 49 Hz (the overhead guard's halving), and checks
// that the heatmap, timeline and per-CPU answers carry CPU time that stays
// within 10% across the change, named by their unit, while their sample
// counts halve; and that /api/pprof weighs each sample by its own period.
func TestAPIAcrossARateChange(t *testing.T) {
	db, cpuNs := rateChangeStore(t, false)
	fx := newFixture(t, db, Options{})
	q := fmt.Sprintf("from=%d&to=%d", base, base+60)

	near := func(what string, a, b float64) {
		t.Helper()
		if b <= 0 || math.Abs(a-b) > 0.1*b {
			t.Fatalf("%s: %v before the rate change, %v after: want within 10%%", what, b, a)
		}
	}
	var h struct {
		Unit   string      `json:"unit"`
		CPU    [][]float64 `json:"cpu"`
		Values [][]int     `json:"values"`
		MaxCPU float64     `json:"maxcpu"`
	}
	resp, body := fx.get(t, "/api/heatmap?rows=5&"+q)
	mustOK(t, "heatmap", resp, body)
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if h.Unit != "cpu-seconds" || len(h.CPU) != 60 || h.MaxCPU <= 0 {
		t.Fatalf("heatmap: unit %q, %d columns, max %v", h.Unit, len(h.CPU), h.MaxCPU)
	}
	sum := func(v []float64) (s float64) {
		for _, x := range v {
			s += x
		}
		return s
	}
	for c := 1; c < 29; c++ {
		near(fmt.Sprintf("heatmap column %d", c), sum(h.CPU[c+30]), sum(h.CPU[c]))
		for r := range h.CPU[c] {
			near(fmt.Sprintf("heatmap cell (%d, %d)", c, r), h.CPU[c+30][r], h.CPU[c][r])
		}
	}
	if h.Values[10][0] < 2*h.Values[40][0]-2 {
		t.Fatalf("heatmap counts %d before, %d after: the rate did not halve", h.Values[10][0], h.Values[40][0])
	}

	var tl timelineJSON
	resp, body = fx.get(t, "/api/timeline?step=1s&"+q)
	mustOK(t, "timeline", resp, body)
	if err := json.Unmarshal(body, &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Unit != "cpu-seconds" || len(tl.CPU) != 60 || len(tl.Counts) != 60 {
		t.Fatalf("timeline: unit %q, %d steps, %d counts", tl.Unit, len(tl.CPU), len(tl.Counts))
	}
	for i := 1; i < 29; i++ {
		near(fmt.Sprintf("timeline step %d", i), tl.CPU[i+30], tl.CPU[i])
	}

	var pc struct {
		Unit string      `json:"unit"`
		CPU  [][]float64 `json:"cpu"`
	}
	resp, body = fx.get(t, "/api/percpu?step=1s&"+q)
	mustOK(t, "percpu", resp, body)
	if err := json.Unmarshal(body, &pc); err != nil {
		t.Fatal(err)
	}
	if pc.Unit != "cpu-seconds" || len(pc.CPU) != 1 {
		t.Fatalf("per-CPU: unit %q, %d CPUs", pc.Unit, len(pc.CPU))
	}
	for i := 1; i < 29; i++ {
		near(fmt.Sprintf("per-CPU step %d", i), pc.CPU[0][i+30], pc.CPU[0][i])
	}

	resp, body = fx.get(t, "/api/pprof?"+q)
	mustOK(t, "pprof", resp, body)
	p, err := profile.ParseData(body)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range p.Sample {
		total += s.Value[1]
	}
	if total != cpuNs || float64(total) > 1.001*float64(p.DurationNanos) {
		t.Fatalf("pprof: %d ns of CPU in %d ns; the samples' periods add up to %d", total, p.DurationNanos, cpuNs)
	}
}

// TestDiffAndGrowthAcrossARateChange asks /api/diff (both encodings and
// both normalisations) and /api/top with a baseline to compare 10 s of a
// steady burn after the sampling rate halved (A) with 10 s before it (B):
// every figure is CPU time, named by its unit, and nothing grew or shrank,
// though A holds half B's samples.
func TestDiffAndGrowthAcrossARateChange(t *testing.T) {
	db, _ := rateChangeStore(t, false)
	fx := newFixture(t, db, Options{})
	q := fmt.Sprintf("from=%d&to=%d&from2=%d&to2=%d", base+40, base+50, base+10, base+20)
	// 10 ms: a sample's period, the windows' edges.
	small := func(sec float64) bool { return math.Abs(sec) < 0.01 }

	for _, norm := range []string{"total", "length"} {
		var d diffJSON
		target := "/api/diff?normalize=" + norm + "&" + q
		resp, body := fx.get(t, target)
		mustOK(t, target, resp, body)
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
		if d.Unit != "cpu-seconds" || d.Root == nil || d.SamplesB < 2*d.SamplesA-2 || !small(d.TotalA-10) || !small(d.TotalB-10) {
			t.Fatalf("%s: unit %q, A %d samples, %v s; B %d samples, %v s: want cpu-seconds, half the samples, 10 s each",
				target, d.Unit, d.SamplesA, d.TotalA, d.SamplesB, d.TotalB)
		}
		var check func(n *diffNodeJSON)
		check = func(n *diffNodeJSON) {
			if !small(n.DeltaTotal) || !small(n.Delta) || !small(n.A-n.B) {
				t.Fatalf("%s, %s: A %v s, B %v s, change %v s (self %v s): a steady burn changed", target, n.Name, n.A, n.B, n.DeltaTotal, n.Delta)
			}
			for _, c := range n.Children {
				check(c)
			}
		}
		check(d.Root)
		resp, body = fx.get(t, target+"&encoding=compact")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != binaryType {
			t.Fatalf("%s compact: %d %s", target, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := nested(t, target, body); !sameJSON(t, got, mustJSON(t, d)) {
			t.Fatalf("%s: the compact answer decodes to %s", target, got)
		}
	}

	var g growthAnswer
	resp, body := fx.get(t, "/api/top?"+q)
	mustOK(t, "growth", resp, body)
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatal(err)
	}
	if g.Unit != "cpu-seconds" || g.Samples2 < 2*g.Samples-2 || !small(g.CPU-10) || !small(g.CPU2-10) || len(g.Functions) != 2 {
		t.Fatalf("growth: unit %q, A %d samples, %v s; B %d samples, %v s; %d functions", g.Unit, g.Samples, g.CPU, g.Samples2, g.CPU2, len(g.Functions))
	}
	for _, f := range g.Functions {
		if f.Total2 < 2*f.Total-2 || !small(f.TotalCPU-f.TotalCPU2) || !small(f.DeltaTotalCPU) || !small(f.DeltaSelfCPU) || f.TotalCPU < 9.99 {
			t.Fatalf("growth of %s: %d samples, %v s in A; %d, %v s in B; grew %v s (self %v s): a steady burn grew or shrank",
				f.Name, f.Total, f.TotalCPU, f.Total2, f.TotalCPU2, f.DeltaTotalCPU, f.DeltaSelfCPU)
		}
	}
}

// TestNoSamplesInRange asks for ranges past the data: the answers say
// there are no samples there and where the data starts and ends, instead
// of "to must be after from".
func TestNoSamplesInRange(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	for _, tc := range []struct{ path, param string }{
		{"/api/heatmap?source=host&from=2030-01-01T00:00:00Z", "from"},
		{"/api/timeline?source=host&to=2020-01-01T00:00:00Z", "to"},
	} {
		resp, body := fx.get(t, tc.path)
		wantParamError(t, tc.path, resp, body, tc.param)
		if !strings.Contains(string(body), "no samples") || !strings.Contains(string(body), "samples span 2026-11-21T") {
			t.Errorf("%s: %s, want no samples and where the data is", tc.path, body)
		}
	}
}

// mustJSON encodes v, failing the test if it cannot.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
