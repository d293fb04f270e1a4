package web

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestAPIAcrossARateChange records a process that keeps CPU 0 busy, 30 s
// at 99 Hz then 30 s at 49 Hz (the overhead guard's halving), and checks
// that the heatmap, timeline and per-CPU answers carry CPU time that stays
// within 10% across the change, named by their unit, while their sample
// counts halve; and that /api/pprof weighs each sample by its own period.
func TestAPIAcrossARateChange(t *testing.T) {
	p99, p49 := int64(time.Second)/99, int64(time.Second)/49
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", PeriodNs: p99, BlockDuration: 20 * time.Second, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start := int64(base) * int64(time.Second)
	change := start + 30*int64(time.Second)
	stack := []sample.Frame{{Function: "burn", Module: "/usr/bin/burn", Kind: sample.KindUser}}
	var cpuNs int64
	burn := func(from, to, period int64) {
		for ts := from; ts < to; ts += period {
			s := sample.Sample{Time: ts / 1000 * 1000, PID: 7, TID: 7, Comm: "burn", Stack: stack}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			cpuNs += period
		}
	}
	burn(start, change, p99)
	db.SetPeriod(p49)
	burn(change, change+30*int64(time.Second), p49)
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
