package overhead

import (
	"math"
	"testing"
)

// TestRateModel: a part's slope is learned from rates a quarter apart,
// each seen in two windows or more, by medians, never negative; one
// window a rate (the busy run whose first windows at 99, 49 and 24 Hz
// moved with the machine's load) or rates close together teach nothing.
func TestRateModel(t *testing.T) {
	window := func(samples, rest float64) Cost {
		return Cost{Share: samples + rest, Parts: []PartShare{{"samples", samples, true}}}
	}
	var m rateModel
	m.add(99, window(0.514, 1.088))
	m.add(49, window(0.256, 0.937))
	m.add(24, window(0.157, 0.869))
	if s := m.slopes(); s != nil {
		t.Fatalf("one window a rate: slopes %v, want none", s)
	}
	m = rateModel{}
	for range 2 {
		m.add(47, window(0.16, 0.20))
		m.add(50, window(0.30, 0.50))
	}
	if s := m.slopes(); s != nil {
		t.Fatalf("47 and 50 Hz: slopes %v, want none (rates less than a quarter apart)", s)
	}
	// Samples 0.004% of one CPU per Hz, the rest 0.002% and 0.1% flat;
	// one burst window at 80 Hz (the rest 1.5%) among three moves neither
	// the median nor the slope.
	m = rateModel{}
	for _, hz := range []int{40, 40, 60, 60, 80, 80, 80} {
		m.add(hz, window(0.004*float64(hz), 0.1+0.002*float64(hz)))
	}
	m.add(80, window(0.32, 1.5))
	s := m.slopes()
	if math.Abs(s["samples"]-0.004) > 1e-9 || math.Abs(s[restName]-0.002) > 1e-9 {
		t.Errorf("slopes %v, want samples 0.004, the rest 0.002", s)
	}
	// A cost that falls as the rate rises is taken as flat.
	m = rateModel{}
	for range 2 {
		m.add(50, window(0.3, 0.5))
		m.add(99, window(0.5, 0.3))
	}
	if s := m.slopes(); s[restName] != 0 || s["samples"] <= 0 {
		t.Errorf("slopes %v, want the rest 0 (it fell), samples above 0", s)
	}
	// The model keeps the last modelWindows windows.
	for range modelWindows + 5 {
		m.add(60, window(0.2, 0.2))
	}
	if n, rates := m.rates(); n != modelWindows || rates != 1 {
		t.Errorf("%d windows at %d rates, want %d at 1", n, rates, modelWindows)
	}
}
