package main

import (
	"math"
	"slices"
	"testing"
)

// script is heatscope's perf-script export as it writes a Python
// process's samples: a native-only one, a whole chain, and one whose
// chain misses middle, of two processes.
const script = `python3.11 29724/29724 [000] 1795821025.384233: 10101010 cpu-clock:
	          5a85da [python3.11+0x5a85da] (/usr/bin/python3.11)
	          5a8000 _PyEval_EvalFrameDefault (/usr/bin/python3.11)

python3.11 29724/29724 [001] 1795821025.454956: 10101010 cpu-clock:
	          5009cb PyObject_Free (/usr/bin/python3.11)
	               0 py::inner:/x/busy.py (/x/busy.py)
	               0 py::middle:/x/busy.py (/x/busy.py)
	               0 py::outer:/x/busy.py (/x/busy.py)
	               0 py::<module>:/x/busy.py (/x/busy.py)

python 3 41/42 [000] 1795821025.5: 10101010 cpu-clock:
	               0 py::inner:/x/busy.py (/x/busy.py)
	               0 py::outer:/x/busy.py (/x/busy.py)
	               0 py::<module>:/x/busy.py (/x/busy.py)
`

func TestParseScript(t *testing.T) {
	got := parseScript([]byte(script))
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3: %+v", len(got), got)
	}
	if got[0].pid != 29724 || got[0].at != 1795821025.384233 || len(got[0].python) != 0 {
		t.Errorf("first sample %+v: want pid 29724 at 1795821025.384233, no Python frames", got[0])
	}
	if !got[0].evalLoop || got[1].evalLoop {
		t.Errorf("evaluation loop seen in the first two samples: %v, %v; want true (a native frame), false", got[0].evalLoop, got[1].evalLoop)
	}
	if !slices.Equal(got[1].python, busyChain) {
		t.Errorf("second sample's Python frames %q, want %q", got[1].python, busyChain)
	}
	if got[2].pid != 41 || !slices.Equal(got[2].python, []string{"inner", "outer", "<module>"}) {
		t.Errorf("third sample %+v: want pid 41 (a command with a space) and inner, outer, <module>", got[2])
	}
}

func TestWholeChain(t *testing.T) {
	for _, c := range []struct {
		python []string
		want   bool
	}{
		{nil, false},
		{[]string{"inner", "middle", "outer", "<module>"}, true},
		{[]string{"outer", "<module>"}, true},
		{[]string{"<module>"}, true},
		{[]string{"inner", "outer", "<module>"}, false},
		{[]string{"inner", "middle", "outer"}, false},
		{[]string{"x", "inner", "middle", "outer", "<module>"}, false},
	} {
		if got := wholeChain(c.python); got != c.want {
			t.Errorf("wholeChain(%q) = %v, want %v", c.python, got, c.want)
		}
	}
}

// TestParseSetUps reads the agent's "python set-up" debug lines as
// slog's text handler writes them (a value with a space quoted, one
// without not), and leaves other lines out.
func TestParseSetUps(t *testing.T) {
	log := `time=2026-11-28T04:20:00.000Z level=DEBUG msg="unwinder poll" took=1ms queue=0 procs=3 loaded=2
time=2026-11-28T04:20:00.100Z level=DEBUG msg="python set-up" pid=41 by="first request" taken_ns=1795821025000000000 last_taken_ns=1795821025000000000 drained_ns=1795821025002000000 start_ns=1795821025003000000 written_ns=1795821025003500000 interpreter=false
time=2026-11-28T04:20:01.100Z level=DEBUG msg="python set-up" pid=41 by=poll taken_ns=1795821026000000000 last_taken_ns=1795821026000000000 drained_ns=1795821026001000000 start_ns=1795821026100000000 written_ns=1795821026100500000 interpreter=true
`
	got := parseSetUps([]byte(log))
	want := []setUp{
		{pid: 41, by: "first request", taken: 1795821025, drained: 1795821025.002, start: 1795821025.003, written: 1795821025.0035},
		{pid: 41, by: "poll", taken: 1795821026, drained: 1795821026.001, start: 1795821026.1, written: 1795821026.1005, interpreter: true},
	}
	if len(got) != len(want) {
		t.Fatalf("%d set-ups, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.pid != w.pid || g.by != w.by || g.interpreter != w.interpreter ||
			math.Abs(g.taken-w.taken) > 1e-6 || math.Abs(g.drained-w.drained) > 1e-6 || math.Abs(g.start-w.start) > 1e-6 || math.Abs(g.written-w.written) > 1e-6 {
			t.Errorf("set-up %d: %+v, want %+v", i, g, w)
		}
	}
}
