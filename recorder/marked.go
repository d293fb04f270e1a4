package recorder

import "github.com/heatscope/heatscope/sample"

// maxMarked bounds markedStacks: past it, the cache starts again empty.
const maxMarked = 4096

// markedStacks shares the marked copy of a stack (sample.Unwind.Mark)
// between the samples that have the same symbolized stack, walked the same
// way. Marking copies the stack, 2 KB and an allocation per sample of 30
// frames; the symbolizer returns one shared slice per stack it caches, so
// that slice and the unwind bits find the copy made for an earlier sample.
// A hit is checked frame by frame against the stack (a slice found by its
// address must hold the same frames), which costs far less than a copy.
// The cache is emptied when it reaches maxMarked entries and at each exit
// sweep, so it keeps no stack alive for long.
type markedStacks map[markKey][]sample.Frame

type markKey struct {
	first  *sample.Frame
	n      int
	unwind sample.Unwind
}

// mark returns stack marked as u says, shared with earlier samples of the
// same stack and bits: callers must not modify it.
func (m markedStacks) mark(stack []sample.Frame, u *sample.Unwind) []sample.Frame {
	if len(stack) == 0 || min(u.UserFrames, len(stack)) < 2 {
		return stack
	}
	k := markKey{first: &stack[0], n: len(stack), unwind: *u}
	if c, ok := m[k]; ok && sameFrames(c, stack) {
		return c
	}
	if len(m) >= maxMarked {
		clear(m)
	}
	c := u.Mark(stack)
	m[k] = c
	return c
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
