package sample

import (
	"fmt"
	"testing"
)

// TestUnwindMark: the user frames above the sampled pc are marked as the
// bits say (frames past the 128 the bits cover as frame pointers, as the
// labels always took them), on a copy; a sample that says nothing keeps
// its stack.
func TestUnwindMark(t *testing.T) {
	stack := make([]Frame, 3+140) // 3 kernel frames, 140 user frames
	for i := range stack {
		stack[i] = Frame{Function: fmt.Sprint("f", i), Kind: KindUser}
	}
	stack[0].Kind, stack[1].Kind, stack[2].Kind = KindKernel, KindKernel, KindKernel
	u := Unwind{UserFrames: 140, Table: [2]uint64{0b101, 1 << 63}} // frames 1, 3 and 128 with a table
	got := u.Mark(stack)
	for i, f := range got {
		want := MethodNotKnown
		if user := i - 3; user >= 1 {
			want = MethodFP
			if user == 1 || user == 3 || user == 128 {
				want = MethodTable
			}
		}
		if f.Method != want || f.Function != stack[i].Function {
			t.Errorf("frame %d: %s method %d, want %s %d", i, f.Function, f.Method, stack[i].Function, want)
		}
		if stack[i].Method != MethodNotKnown {
			t.Fatalf("Mark changed frame %d of the stack it was given", i)
		}
	}
	for _, u := range []Unwind{{}, {UserFrames: 1, Table: [2]uint64{1}}} {
		if got := u.Mark(stack); &got[0] != &stack[0] {
			t.Errorf("%+v: a copy of a stack with nothing to mark", u)
		}
	}
}

// TestPeriodOf: a frequency and its period convert both ways, the period
// in whole nanoseconds of CPU time.
func TestPeriodOf(t *testing.T) {
	for _, c := range []struct {
		hz     int64
		period int64
	}{{1, 1e9}, {99, 10101010}, {1000, 1e6}, {4999, 200040}} {
		if got := PeriodOf(c.hz); got != c.period {
			t.Errorf("PeriodOf(%d) = %d, want %d", c.hz, got, c.period)
		}
		if got := FrequencyOf(c.period); got < float64(c.hz)*0.9999 || got > float64(c.hz)*1.0001 {
			t.Errorf("FrequencyOf(%d) = %g, want about %d", c.period, got, c.hz)
		}
	}
}

// TestKindNames: every kind has its API name, and Valid knows exactly the
// kinds that have one.
func TestKindNames(t *testing.T) {
	want := map[Kind]string{KindUnknown: "unknown", KindKernel: "kernel", KindUser: "user", KindJIT: "jit", KindPython: "python"}
	for k := range Kind(255) {
		name, known := want[k]
		if k.Valid() != known {
			t.Errorf("Kind(%d).Valid() = %v, want %v", k, k.Valid(), known)
		}
		if known && k.String() != name {
			t.Errorf("Kind(%d).String() = %q, want %q", k, k, name)
		}
		if !known && k.String() != "unknown" {
			t.Errorf("Kind(%d).String() = %q, want \"unknown\"", k, k)
		}
	}
}

// TestFunctionName: a Python frame is named with its file, so that two
// functions of one qualified name stay apart; every other frame by its
// function alone.
func TestFunctionName(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want string
	}{
		{Frame{Function: "<module>", Module: "/srv/train.py", Kind: KindPython, Line: 3}, "<module> (/srv/train.py)"},
		{Frame{Function: "Model.forward", Module: "model.py", Kind: KindPython}, "Model.forward (model.py)"},
		{Frame{Function: "Model.forward", Kind: KindPython}, "Model.forward"},
		{Frame{Function: "[python+0x7f3a1c]", Module: "[python]", Kind: KindPython}, "[python+0x7f3a1c]"},
		{Frame{Function: "deflate", Module: "/usr/lib/libz.so.1", Kind: KindUser}, "deflate"},
		{Frame{Function: "do_syscall_64", Module: KernelModule, Kind: KindKernel}, "do_syscall_64"},
	} {
		if got := c.f.Name(); got != c.want {
			t.Errorf("%+v: Name() = %q, want %q", c.f, got, c.want)
		}
	}
}
