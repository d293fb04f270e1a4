package main

import (
	"math"
	"testing"
)

// TestCostResults checks a run's windows turned into costs per sample:
// the pid filter's cost per run from the idle windows (their median),
// taken out of each window's runs that took no sample, and ratios within
// a round that leave out a window without samples.
func TestCostResults(t *testing.T) {
	r := costRun{"bin": {
		idleName: {{ns: 1000, runs: 10}, {ns: 3000, runs: 10}, {ns: 2000, runs: 10}}, // 100, 300, 200 ns a run: 200
		"native": {{ns: 3000*100 + 200*50, runs: 150, samples: 100}, {ns: 4000 * 100, runs: 100, samples: 100}, {ns: 500, runs: 5}},
		"py":     {{ns: 6000*100 + 200*10, runs: 110, samples: 100}, {ns: 6000 * 50, runs: 50, samples: 50}, {ns: 6000 * 50, runs: 50, samples: 50}},
	}}
	res := r.results()
	if f := res.filtered["bin"]; f != 200 {
		t.Errorf("filter cost %v ns a run, want 200", f)
	}
	native, py := res.ns["bin"]["native"], res.ns["bin"]["py"]
	if native[0] != 3000 || native[1] != 4000 || !math.IsNaN(native[2]) {
		t.Errorf("native ns per sample %v, want [3000 4000 NaN]", native)
	}
	if py[0] != 6000 || py[1] != 6000 {
		t.Errorf("py ns per sample %v, want 6000 each", py)
	}
	got := roundRatios(py, native)
	if len(got) != 2 || got[0] != 2 || got[1] != 1.5 {
		t.Errorf("ratios %v, want [2 1.5] (the third round has no native sample)", got)
	}
	if q := quartiles([]float64{4, 1, 3, 2, 5, math.NaN()}, "%.1f"); q != "3.0 (IQR 2.0-4.0, 1.0-5.0, n 5)" {
		t.Errorf("quartiles %q", q)
	}
}
