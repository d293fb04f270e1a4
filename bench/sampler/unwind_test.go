package main

import "testing"

// TestSteadyMedianLeavesOutUnmeasured: a run without a steady figure (-1)
// is not part of the median; none measured prints "-".
func TestSteadyMedianLeavesOutUnmeasured(t *testing.T) {
	for _, c := range []struct {
		steady []float64
		want   string
	}{
		{[]float64{-1, -1}, "-"},
		{[]float64{-1, 1.5, 2.5, 3.5}, "2.50 (1.50-3.50)%"},
		{[]float64{0.25}, "0.25 (0.25-0.25)%"},
	} {
		var rs []unwindResult
		for _, s := range c.steady {
			rs = append(rs, unwindResult{steady: s})
		}
		if got := steadyMedian(rs); got != c.want {
			t.Errorf("steadyMedian(%v) = %q, want %q", c.steady, got, c.want)
		}
	}
}
