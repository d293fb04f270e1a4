package overhead

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// fixedSampler is a Sampler that only remembers its frequency: the guard's
// decisions are arithmetic on measured shares, tested here; the real
// frequency change is tested against the profiler (profiler and cmd tests).
type fixedSampler struct {
	hz  int
	err error
}

func (s *fixedSampler) Frequency() int { return s.hz }
func (s *fixedSampler) SetFrequency(hz int) error {
	if s.err != nil {
		return s.err
	}
	s.hz = hz
	return nil
}

type change struct {
	from, to float64
	reason   string
}

func newTestGuard(t *testing.T, hz int, cfg Config) (*Guard, *fixedSampler, *[]change) {
	t.Helper()
	s := &fixedSampler{hz: hz}
	var changes []change
	cfg.OnChange = func(from, to float64, reason string) { changes = append(changes, change{from, to, reason}) }
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := New(cfg, s, ProcessCPU)
	if err != nil {
		t.Fatal(err)
	}
	return g, s, &changes
}

func TestGuardSteps(t *testing.T) {
	// Budget 1%, target 99 Hz, floor 10 Hz, raise after 3 windows under 0.6%.
	tests := []struct {
		name   string
		shares []float64 // one per window
		want   []int     // frequency after each window
	}{
		{"under budget: no change", []float64{0.9, 0.5, 0.2, 0.7}, []int{99, 99, 99, 99}},
		{"over: halve to the floor", []float64{2, 2, 2, 2, 2}, []int{49, 24, 12, 10, 10}},
		{"raise only after three quiet windows", []float64{3, 0.1, 0.1, 0.1}, []int{49, 49, 49, 98}},
		{"a loud window restarts the count", []float64{3, 0.1, 0.1, 0.8, 0.1, 0.1, 0.1}, []int{49, 49, 49, 49, 49, 49, 98}},
		{"raise no further than the estimate allows", []float64{3, 3, 0.4, 0.4, 0.4}, []int{49, 24, 24, 24, 36}},
		{"raise at least one step, never past the target", []float64{3, 0.59, 0.59, 0.59, 0.01, 0.01, 0.01}, []int{49, 49, 49, 50, 50, 50, 99}},
		{"between the marks: hold", []float64{3, 0.7, 0.7, 0.7, 0.7}, []int{49, 49, 49, 49, 49}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, s, changes := newTestGuard(t, 99, Config{MaxCPU: 1})
			var got []int
			for _, share := range tt.shares {
				g.Observe(share)
				got = append(got, s.hz)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("frequencies %v, want %v", got, tt.want)
			}
			// Every change was counted and reported with its reason.
			n := 0
			prev := 99
			for _, hz := range got {
				if hz != prev {
					c := (*changes)[n]
					if c.from != float64(prev) || c.to != float64(hz) || !strings.Contains(c.reason, "budget") {
						t.Errorf("change %d = %+v, want %d -> %d with a reason naming the budget", n, c, prev, hz)
					}
					n++
					prev = hz
				}
			}
			if len(*changes) != n || g.Changes() != uint64(n) {
				t.Errorf("%d changes reported, Changes() = %d, want %d", len(*changes), g.Changes(), n)
			}
			if g.LastShare() != tt.shares[len(tt.shares)-1] {
				t.Errorf("LastShare() = %v, want %v", g.LastShare(), tt.shares[len(tt.shares)-1])
			}
		})
	}
}

func TestGuardFailedChangeIsNotCounted(t *testing.T) {
	g, s, changes := newTestGuard(t, 99, Config{MaxCPU: 1})
	s.err = errors.New("ioctl failed")
	g.Observe(5)
	if s.hz != 99 || g.Changes() != 0 || len(*changes) != 0 {
		t.Errorf("after a failed change: %d Hz, %d changes, %d reported", s.hz, g.Changes(), len(*changes))
	}
}

func TestGuardConfig(t *testing.T) {
	if _, err := New(Config{MaxCPU: 0}, &fixedSampler{hz: 99}, ProcessCPU); err == nil {
		t.Error("a zero budget was accepted")
	}
	// A target under the default floor is its own floor.
	g, s, _ := newTestGuard(t, 5, Config{MaxCPU: 1})
	g.Observe(50)
	if s.hz != 5 {
		t.Errorf("target 5 Hz was cut to %d Hz", s.hz)
	}
}

func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i ^ x
	}
	after, err := ProcessCPU()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time did not grow over a busy loop (%v -> %v, %d)", before, after, x)
	}
}
