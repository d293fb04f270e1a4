package symbolize

import (
	"slices"
	"sync"

	"github.com/heatscope/heatscope/sample"
)

// stackCache remembers the frames of recently symbolized stacks, so that a
// stack seen again (a busy loop is sampled in the same few stacks over and
// over) costs one hash and one comparison instead of a lookup per frame and
// a new frames slice. It is direct-mapped: an entry is found at its hash's
// slot or not at all, and a new stack simply replaces the slot's old one.
//
// An entry is keyed by the process and the version of its mappings
// (process.version, new each time they are read), so a process that
// execs, dlopens or reuses an exited process's pid never meets stale
// frames. Only stacks whose every frame was named are kept, and none with
// JIT frames, whose perf map may name an address differently later.
type stackCache struct {
	mu      sync.Mutex
	entries [stackCacheSlots]stackEntry
}

// stackCacheSlots is the number of stacks kept: about 1.5 MB at 20 frames a
// stack.
const stackCacheSlots = 1024

type stackEntry struct {
	hash    uint64
	pid     uint32
	version uint64
	kernel  []uint64
	user    []uint64
	frames  []sample.Frame
}

// stackHash mixes a stack's key into 64 bits.
func stackHash(pid uint32, version uint64, kernel, user []uint64) uint64 {
	h := uint64(pid)*0x9E3779B97F4A7C15 ^ version
	mix := func(x uint64) {
		h ^= x
		h *= 0xBF58476D1CE4E5B9
		h ^= h >> 31
	}
	for _, a := range kernel {
		mix(a)
	}
	mix(uint64(len(kernel)))
	for _, a := range user {
		mix(a)
	}
	return h
}

// get returns the frames cached for the stack, or nil. They are shared:
// callers must not modify them.
func (c *stackCache) get(hash uint64, pid uint32, version uint64, kernel, user []uint64) []sample.Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &c.entries[hash%stackCacheSlots]
	if e.frames == nil || e.hash != hash || e.pid != pid || e.version != version ||
		!slices.Equal(e.kernel, kernel) || !slices.Equal(e.user, user) {
		return nil
	}
	return e.frames
}

// put caches frames for the stack, replacing whatever its slot held.
func (c *stackCache) put(hash uint64, pid uint32, version uint64, kernel, user []uint64, frames []sample.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &c.entries[hash%stackCacheSlots]
	e.hash, e.pid, e.version = hash, pid, version
	e.kernel = append(e.kernel[:0], kernel...)
	e.user = append(e.user[:0], user...)
	e.frames = frames
}
