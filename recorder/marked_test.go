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
	var m markedStacks
	stack := testStack(30)
	u := sample.Unwind{UserFrames: 26, Table: [2]uint64{0b1011}}
	a := m.mark(stack, &u, true)
	if b := m.mark(stack, &u, true); &b[0] != &a[0] {
		t.Error("the same stack and bits: a second copy")
	}
	if want := u.Mark(stack); !slices.Equal(a, want) {
		t.Errorf("marked %v, want %v", a, want)
	}
	if stack[5].Method != sample.MethodNotKnown {
		t.Fatal("the symbolizer's frames were marked")
	}
	v := sample.Unwind{UserFrames: 26, Table: [2]uint64{0b1111}}
	if c := m.mark(stack, &v, true); &c[0] == &a[0] || !slices.Equal(c, v.Mark(stack)) {
		t.Error("other bits: the first copy, or a wrong one")
	}
	other := testStack(30)
	if c := m.mark(other, &u, true); &c[0] == &a[0] {
		t.Error("another slice with the same frames: the first slice's copy (its key is its address)")
	}
	// The same slice, now holding other frames (a symbolizer that reused
	// its memory): never the old copy.
	stack[10].Function = "changed"
	if c := m.mark(stack, &u, true); c[10].Function != "changed" {
		t.Errorf("a slice whose frames changed got the copy of its old frames (%s)", c[10].Function)
	}
	// Nothing to mark: the stack itself, not cached.
	one := sample.Unwind{UserFrames: 1}
	if c := m.mark(stack, &one, true); &c[0] != &stack[0] {
		t.Error("a stack with nothing to mark was copied")
	}
	for range 2 * maxMarked {
		m.mark(testStack(8), &u, true)
	}
	if len(m.m) > maxMarked {
		t.Errorf("%d cached stacks, bound %d", len(m.m), maxMarked)
	}
}

// cachedBytes returns the size of the frames c keeps alive, counted from
// its entries: each copy, and the symbolizer's slice its key points to.
func cachedBytes(c *markedStacks) int {
	n := 0
	for k, m := range c.m {
		n += (k.n + len(m)) * frameBytes
	}
	return n
}

// TestMarkedStacksBytes: stacks the symbolizer does not share (a new slice
// each sample, as for a stack with a JIT frame) are marked but not cached,
// and shared ones are cached within maxMarkedBytes of frames, whatever
// their number.
func TestMarkedStacksBytes(t *testing.T) {
	var m markedStacks
	u := sample.Unwind{UserFrames: 26, Table: [2]uint64{0b1011}}
	for range 2 * maxMarked {
		stack := testStack(30)
		if c := m.mark(stack, &u, false); !slices.Equal(c, u.Mark(stack)) {
			t.Fatalf("an unshared stack marked %v, want %v", c, u.Mark(stack))
		}
		if n := cachedBytes(&m); n > maxMarkedBytes {
			t.Fatalf("unshared stacks: the cache keeps %d bytes of frames, bound %d", n, maxMarkedBytes)
		}
	}
	if len(m.m) != 0 {
		t.Errorf("%d unshared stacks cached, want none (they never hit)", len(m.m))
	}
	// Shared stacks of 127 frames: the byte bound, not the entry bound,
	// empties the cache.
	long := sample.Unwind{UserFrames: 123, Table: [2]uint64{0b1011}}
	most := 0
	for range 2 * maxMarked {
		m.mark(testStack(127), &long, true)
		n := cachedBytes(&m)
		if n > maxMarkedBytes {
			t.Fatalf("shared stacks: the cache keeps %d bytes of frames, bound %d", n, maxMarkedBytes)
		}
		if n != m.bytes {
			t.Fatalf("the cache counts %d bytes, its entries hold %d", m.bytes, n)
		}
		most = max(most, n)
	}
	if most < maxMarkedBytes/2 {
		t.Errorf("the cache never held more than %d bytes of frames: it empties far below its bound %d", most, maxMarkedBytes)
	}
	// A shared stack still hits after the cache emptied itself.
	stack := testStack(127)
	if a, b := m.mark(stack, &long, true), m.mark(stack, &long, true); &a[0] != &b[0] {
		t.Error("a shared stack marked twice in a row: two copies")
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
		var m markedStacks
		b.ReportAllocs()
		for b.Loop() {
			_ = m.mark(stack, &u, true)
		}
	})
}
