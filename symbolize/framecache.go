package symbolize

import (
	"sync"

	"github.com/heatscope/heatscope/sample"
)

// frameCache remembers recently named user frames one by one, for the
// stacks the stack cache does not hold: a CPU-bound program's leaf moves
// from sample to sample (libc's recursive sort, a loop's instructions), so
// in churn case b most of its samples were stacks not seen before, made
// of frames that were, and each frame cost a search of the process's
// mappings and of its binary's symbols. Like stackCache it is
// direct-mapped, and keyed by the version of the process's mappings
// (process.version, new each time they are set, and never shared by two
// processes), so a frame is never answered for other mappings. Only named
// native frames are kept: not JIT frames (a perf map may name an address
// differently later) nor unknown ones (a mapping read again may name them).
type frameCache struct {
	mu    sync.Mutex
	slots [frameCacheSlots]frameSlot
}

// frameCacheSlots is the number of frames kept: about 400 KB.
const frameCacheSlots = 4096

type frameSlot struct {
	version      uint64 // 0: empty (versions start at 1)
	addr, lookup uint64
	frame        sample.Frame
}

func frameSlotOf(version, addr, lookup uint64) int {
	h := version*0x9E3779B97F4A7C15 ^ addr
	h ^= (addr - lookup) << 63
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 29
	return int(h % frameCacheSlots)
}

// get returns the frame cached for the address (looked up at lookup) of
// the mappings of that version.
func (c *frameCache) get(version, addr, lookup uint64) (sample.Frame, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &c.slots[frameSlotOf(version, addr, lookup)]
	if e.version != version || e.addr != addr || e.lookup != lookup {
		return sample.Frame{}, false
	}
	return e.frame, true
}

// put remembers a named native frame.
func (c *frameCache) put(version, addr, lookup uint64, f sample.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slots[frameSlotOf(version, addr, lookup)] = frameSlot{version: version, addr: addr, lookup: lookup, frame: f}
}
