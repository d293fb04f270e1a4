package main

import (
	"slices"
	"testing"
)

// script is heatscope's perf-script export as it writes a Python
// process's samples: a native-only one, a whole chain, and one whose
// chain misses middle, of two processes.
const script = `python3.11 29724/29724 [000] 1795821025.384233: 10101010 cpu-clock:
	          5a85da [python3.11+0x5a85da] (/usr/bin/python3.11)

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
