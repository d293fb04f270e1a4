package recorder

import (
	"unsafe"

	"github.com/heatscope/heatscope/sample"
)

// maxMarked bounds the entries of markedStacks and maxMarkedBytes the
// frames they keep alive: past either, the cache starts again empty.
const (
	maxMarked      = 4096
	maxMarkedBytes = 1 << 20
)

// frameBytes is the size of one sample.Frame, without the strings it
// points to (the symbolizer's, shared).
const frameBytes = int(unsafe.Sizeof(sample.Frame{}))

// markedStacks shares the marked copy of a stack (sample.Unwind.Mark)
// between the samples that have the same symbolized stack, walked the same
// way. Marking copies the stack, 2 KB and an allocation per sample of 30
// frames; the symbolizer returns one shared slice per stack it caches, so
// that slice and the unwind bits find the copy made for an earlier sample.
// Only those shared stacks are cached: the symbolizer returns a new slice
// on every call for the others (a JIT or unresolved frame), which would
// never hit and would keep both slices alive. A hit is checked frame by
// frame against the stack (a slice found by its address must hold the
// same frames), which costs far less than a copy. The cache is emptied
// when it reaches maxMarked entries or maxMarkedBytes of frames, and at
// each exit sweep, so it keeps no stack alive for long.
type markedStacks struct {
	m map[markKey][]sample.Frame
	// bytes is the size of the frames the entries keep alive: the copy,
	// and the symbolizer's slice, which the key's pointer holds.
	bytes int
}

type markKey struct {
	first  *sample.Frame
	n      int
	unwind sample.Unwind
}

// mark returns stack marked as u says; shared says whether the symbolizer
// shares stack between samples (symbolize.Symbolizer.SymbolizeShared). A
// shared stack's copy is shared with earlier samples of the same stack
// and bits: callers must not modify it.
func (c *markedStacks) mark(stack []sample.Frame, u *sample.Unwind, shared bool) []sample.Frame {
	if len(stack) == 0 || min(u.UserFrames, len(stack)) < 2 {
		return stack
	}
	if !shared {
		return u.Mark(stack)
	}
	k := markKey{first: &stack[0], n: len(stack), unwind: *u}
	if m, ok := c.m[k]; ok && sameFrames(m, stack) {
		return m
	}
	size := 2 * len(stack) * frameBytes
	if size > maxMarkedBytes {
		return u.Mark(stack)
	}
	if len(c.m) >= maxMarked || c.bytes+size > maxMarkedBytes {
		c.clear()
	}
	if c.m == nil {
		c.m = make(map[markKey][]sample.Frame)
	}
	m := u.Mark(stack)
	if old, ok := c.m[k]; ok { // the same slice, now holding other frames
		c.bytes -= 2 * len(old) * frameBytes
	}
	c.m[k] = m
	c.bytes += size
	return m
}

// clear empties the cache.
func (c *markedStacks) clear() {
	clear(c.m)
	c.bytes = 0
}

// sameFrames reports whether a and b hold the same frames but for their
// methods.
func sameFrames(a, b []sample.Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		f, g := &a[i], &b[i]
		if f.Function != g.Function || f.Address != g.Address || f.Module != g.Module || f.BuildID != g.BuildID || f.Kind != g.Kind {
			return false
		}
	}
	return true
}
