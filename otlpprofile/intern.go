package otlpprofile

import (
	"encoding/binary"
	"slices"

	"github.com/heatscope/heatscope/sample"
)

// The interner's bounds: past any of them, the encoder starts the next
// batch with an empty one, so that what it keeps stays bounded (about
// 10 MiB) on a node whose stacks keep changing.
const (
	maxInternFrames = 1 << 16
	maxInternStacks = 1 << 14
	maxInternSlices = 1 << 14
)

// interner numbers the frames and stacks an encoder has seen, across its
// batches, so that a batch finds the stack of a sample by a slice index
// instead of hashing the sample's frames: the recorder's samples of one
// stack share one slice (symbolize caches it), which the interner
// remembers by its address.
type interner struct {
	frameID map[sample.Frame]int32
	frames  []sample.Frame   // by frame id
	stackID map[string]int32 // by the stack's frame ids, 4 bytes each
	stacks  [][]int32        // the frame ids of each stack, by stack id
	slices  map[stackRef]sharedStack
	keyBuf  []byte
}

// stackRef names a stack slice by its first frame's address and length.
type stackRef struct {
	first *sample.Frame
	n     int
}

// sharedStack is a stack slice seen before, and its stack's id. The
// frames are checked on each hit: a slice of the same address may hold
// other frames by now (the recorder's marked copies are reused so).
type sharedStack struct {
	frames []sample.Frame
	id     int32
}

func newInterner() *interner {
	return &interner{frameID: map[sample.Frame]int32{}, stackID: map[string]int32{}, slices: map[stackRef]sharedStack{}}
}

// full reports whether the interner is past its bounds.
func (in *interner) full() bool {
	return len(in.frames) > maxInternFrames || len(in.stacks) > maxInternStacks
}

// stack returns the id of a stack of at least one frame.
func (in *interner) stack(frames []sample.Frame) int32 {
	ref := stackRef{&frames[0], len(frames)}
	if c, ok := in.slices[ref]; ok && slices.Equal(c.frames, frames) {
		return c.id
	}
	in.keyBuf = in.keyBuf[:0]
	for i := range frames {
		in.keyBuf = binary.LittleEndian.AppendUint32(in.keyBuf, uint32(in.frame(&frames[i])))
	}
	id, ok := in.stackID[string(in.keyBuf)]
	if !ok {
		id = int32(len(in.stacks))
		ids := make([]int32, len(frames))
		for i := range ids {
			ids[i] = int32(binary.LittleEndian.Uint32(in.keyBuf[4*i:]))
		}
		in.stacks = append(in.stacks, ids)
		in.stackID[string(in.keyBuf)] = id
	}
	if len(in.slices) < maxInternSlices {
		in.slices[ref] = sharedStack{frames, id}
	}
	return id
}

// frame returns the id of a frame.
func (in *interner) frame(f *sample.Frame) int32 {
	if id, ok := in.frameID[*f]; ok {
		return id
	}
	id := int32(len(in.frames))
	in.frames = append(in.frames, *f)
	in.frameID[*f] = id
	return id
}
