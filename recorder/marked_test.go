package recorder

import (
	"fmt"
	"slices"
	"testing"

	"github.com/heatscope/heatscope/sample"
)

// testStack is a symbolized stack of n frames: 4 kernel ones, then user
// ones.
func testStack(n int) []sample.Frame {
	st := make([]sample.Frame, n)
	for i := range st {
		st[i] = sample.Frame{Function: fmt.Sprint("f", i), Module: "/bin/app", Address: uint64(0x1000 + 16*i), Kind: sample.KindUser}
		if i < 4 {
			st[i].Kind, st[i].Module = sample.KindKernel, sample.KernelModule
		}
	}
	return st
}

// TestMarkedStacksShared: the samples of one stack walked the same way
// share one marked copy; other bits, another stack, or a slice at the
// same address holding other frames get their own; the symbolizer's
// frames are never marked; the cache stays within maxMarked.
func TestMarkedStacksShared(t *testing.T) {
	m := markedStacks{}
	stack := testStack(30)
	u := sample.Unwind{UserFrames: 26, Table: [2]uint64{0b1011}}
	a := m.mark(stack, &u)
	if b := m.mark(stack, &u); &b[0] != &a[0] {
		t.Error("the same stack and bits: a second copy")
	}
	if want := u.Mark(stack); !slices.Equal(a, want) {
		t.Errorf("marked %v, want %v", a, want)
	}
	if stack[5].Method != sample.MethodNotKnown {
		t.Fatal("the symbolizer's frames were marked")
	}
	v := sample.Unwind{UserFrames: 26, Table: [2]uint64{0b1111}}
	if c := m.mark(stack, &v); &c[0] == &a[0] || !slices.Equal(c, v.Mark(stack)) {
		t.Error("other bits: the first copy, or a wrong one")
	}
	other := testStack(30)
	if c := m.mark(other, &u); &c[0] == &a[0] {
		t.Error("another slice with the same frames: the first slice's copy (its key is its address)")
	}
	// The same slice, now holding other frames (a symbolizer that reused
	// its memory): never the old copy.
	stack[10].Function = "changed"
	if c := m.mark(stack, &u); c[10].Function != "changed" {
		t.Errorf("a slice whose frames changed got the copy of its old frames (%s)", c[10].Function)
	}
	// Nothing to mark: the stack itself, not cached.
	one := sample.Unwind{UserFrames: 1}
	if c := m.mark(stack, &one); &c[0] != &stack[0] {
		t.Error("a stack with nothing to mark was copied")
	}
	for range 2 * maxMarked {
		m.mark(testStack(8), &u)
	}
	if len(m) > maxMarked {
		t.Errorf("%d cached stacks, bound %d", len(m), maxMarked)
	}
}

// BenchmarkMarkedStacks marks a 30-frame stack (26 user frames) per sample
// as the recorder does: "copy" with a copy per sample (sample.Unwind.Mark),
// "shared" through markedStacks (the same symbolized stack each time).
func BenchmarkMarkedStacks(b *testing.B) {
	stack := testStack(30)
	u := sample.Unwind{UserFrames: 26, Table: [2]uint64{0x0fff_ffff}}
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = u.Mark(stack)
		}
	})
	b.Run("shared", func(b *testing.B) {
		m := markedStacks{}
		b.ReportAllocs()
		for b.Loop() {
			_ = m.mark(stack, &u)
		}
	})
}
