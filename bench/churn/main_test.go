package main

import (
	"math"
	"slices"
	"testing"
)

// TestGuardChanges: every change the guard logged is read, with its rates
// and reason; other lines are not.
func TestGuardChanges(t *testing.T) {
	log := `time=2026-11-27T16:16:03.899Z level=INFO msg="new processes are now symbolized from the mappings snapshotted as they exit" why="x"
time=2026-11-27T16:16:16.834Z level=INFO msg="sampling frequency changed" from_hz=99 to_hz=49 reason="agent CPU 1.552% of one CPU is over the 1% budget"
recording    20s: 4190 samples, 0 dropped, 0 stack errors, 49 Hz
time=2026-11-27T16:16:26.832Z level=INFO msg="sampling frequency changed" from_hz=49 to_hz=24 reason="agent CPU 1.452% of one CPU is over the 1% budget"
time=2026-11-27T16:16:36.832Z level=INFO msg="overhead guard: gave up work before lowering the sampling rate" work="unwind tables not loaded yet" reason="agent CPU 1.2% of one CPU is over the 1% budget"
time=2026-11-27T16:17:36.832Z level=INFO msg="overhead guard: took up work again" work="unwind tables not loaded yet" reason="agent CPU 0.2% of one CPU has stayed under 60% of the 1% budget"
time=2026-11-27T16:18:36.832Z level=WARN msg="overhead guard: over the budget, most of it work a lower sampling rate does not reduce: the rate stays" hz=99 reason="agent CPU 1.5% of one CPU is over the 1% budget (new processes 0.900%, samples and the rest 0.600%)"
time=2026-11-27T16:19:36.832Z level=WARN msg="overhead guard: over the budget, but a lower sampling rate did not reduce it: the rate stays" hz=99 reason="agent CPU 1.4% of one CPU is over the 1% budget (samples 0.800%, the rest 0.500%, new processes 0.100%)"
`
	want := []string{
		"99 → 49 Hz: agent CPU 1.552% of one CPU is over the 1% budget",
		"49 → 24 Hz: agent CPU 1.452% of one CPU is over the 1% budget",
		"gave up unwind tables not loaded yet: agent CPU 1.2% of one CPU is over the 1% budget",
		"took up again unwind tables not loaded yet: agent CPU 0.2% of one CPU has stayed under 60% of the 1% budget",
		"kept 99 Hz over the budget: agent CPU 1.5% of one CPU is over the 1% budget (new processes 0.900%, samples and the rest 0.600%)",
		"kept 99 Hz over the budget: agent CPU 1.4% of one CPU is over the 1% budget (samples 0.800%, the rest 0.500%, new processes 0.100%)",
	}
	if got := guardChanges(log); !slices.Equal(got, want) {
		t.Errorf("guardChanges = %q, want %q", got, want)
	}
	if got := guardChanges("recorded 30.0s: 100 samples"); got != nil {
		t.Errorf("guardChanges of a log without changes = %q, want none", got)
	}
}

// TestMarginalMicros: the agent's CPU over case a's, per new process over
// case a's; none where the machine started no more processes.
func TestMarginalMicros(t *testing.T) {
	a := result{steadySecs: 20, steadyAgent: 0.2, forks: 200}   // 10 ms/s, 10 processes/s
	b := result{steadySecs: 10, steadyAgent: 0.15, forks: 1100} // 15 ms/s, 110 processes/s
	if got, want := marginalMicros(b, a), 50.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("marginalMicros = %v µs, want %v", got, want)
	}
	if got := marginalMicros(a, a); !math.IsNaN(got) {
		t.Errorf("marginalMicros with no more processes = %v, want NaN", got)
	}
}

// TestMeasuredMicros: the agent's own count of its CPU on new processes,
// and on all its per-process work, per process started; none where no
// process started.
func TestMeasuredMicros(t *testing.T) {
	r := result{forks: 2000, steadyProcesses: 0.02, steadyWork: 0.05}
	if p, w := measuredMicros(r); math.Abs(p-10) > 1e-9 || math.Abs(w-25) > 1e-9 {
		t.Errorf("measuredMicros = %v, %v µs, want 10, 25", p, w)
	}
	if p, w := measuredMicros(result{steadyWork: 1}); !math.IsNaN(p) || !math.IsNaN(w) {
		t.Errorf("measuredMicros without new processes = %v, %v, want NaN", p, w)
	}
}
