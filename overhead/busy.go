package overhead

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Busy measures the agent's CPU and wall time spent while it serves
// queries (someone browsing the recorder's own UI), so that the Guard can
// judge the sampling path alone: a person looking at what is recorded must
// not change how it is recorded. An interval starts when the first of
// the requests under way starts and ends when the last ends; overlapping
// requests count once.
//
// A query's cost does not end with its response: the garbage it leaves
// makes the Go runtime collect and then return the freed memory to the
// system (the scavenger) in the background, seconds later, in what would
// look like the sampling path's time. Measured while a browser drove the
// UI, that tail was about as large as the sampling path's own cost, and
// the Guard halved the rate twice. So when the requests of an interval
// have allocated MinGarbage or more, the interval goes on until the
// garbage is collected and its memory returned (debug.FreeOSMemory), and
// the queries pay for their own garbage.
//
// Nor does a query's CPU all fall inside its handler. The kernel counts
// the CPU of the agent's threads still running on other CPUs only at their
// next scheduler tick (up to 4 ms a thread at Linux's usual 250 Hz), so a
// meter read as the last request ends misses the query threads' last tick;
// and the HTTP server reads and parses each request before any handler
// sees it. Both land just outside the interval, in what would look like
// the sampling path's time. A browser's requests come in bursts a few ms
// apart, several hundred intervals a minute: measured with a browser
// driving the UI (TestBrowsingDoesNotLowerTheRate), the sampling path
// looked 0.9% of a CPU where it costs 0.13% when nobody looks. So an
// interval ends Settle after its last request (and collection): every
// thread has been ticked by then, and a request arriving meanwhile, its
// reading included, joins the interval.
type Busy struct {
	meter CPUMeter
	now   func() time.Time
	// allocated returns the bytes the process has allocated so far.
	allocated func() uint64
	// collect collects the garbage and returns the freed memory.
	collect func()
	// settle waits until the CPU the interval's threads are using has
	// been accounted (nil: the interval ends with its last request).
	settle func()

	mu         sync.Mutex
	n          int           // requests under way, and the interval's end
	closing    bool          // the interval's end (collection, settling) is under way
	joined     bool          // a request entered during the closing
	since      time.Time     // start of the current busy interval
	cpuSince   time.Duration // meter at its start
	allocSince uint64        // allocated at its start, or at its last collection
	wall       time.Duration // closed intervals' wall time
	cpu        time.Duration // and CPU
	collected  uint64        // collections made
}

// MinGarbage is how many bytes the requests of a busy interval must have
// allocated for it to end with a collection: below it, the runtime's
// background work they cause is lost in the sampling path's.
const MinGarbage = 1 << 20

// Settle is how long after its last request a busy interval ends: longer
// than a scheduler tick (10 ms at Linux's lowest rate, 100 Hz) and than
// the pause between a browser's requests for one view.
const Settle = 50 * time.Millisecond

// NewBusy returns a Busy that reads the agent's CPU with meter (the Guard's).
func NewBusy(meter CPUMeter) *Busy {
	return &Busy{meter: meter, now: time.Now, allocated: heapAllocated, collect: debug.FreeOSMemory,
		settle: func() { time.Sleep(Settle) }}
}

// heapAllocated returns the bytes allocated on the heap since the process
// started.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0 // not supported: never collect
	}
	return s[0].Value.Uint64()
}

// Enter marks the start of a request.
func (b *Busy) Enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	if b.closing {
		b.joined = true
	}
	if b.n == 1 {
		b.since = b.now()
		b.cpuSince, _ = b.meter()
		b.allocSince = b.allocated()
	}
}

// Leave marks the end of a request Enter started.
func (b *Busy) Leave() { b.leave(false, false) }

// leave ends a request, or with closed the interval's end, which collected
// the garbage if collected.
func (b *Busy) leave(closed, collected bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if closed {
		b.closing = false
	}
	if collected {
		b.collected++
		b.allocSince = b.allocated()
	}
	b.n--
	if b.n > 0 {
		return
	}
	// The interval's end follows its last request, or a request that
	// joined the end under way.
	if !closed || b.joined {
		heavy := b.allocated()-b.allocSince >= MinGarbage
		if heavy || b.settle != nil {
			b.joined = false
			// The interval's end is its last request. It runs on its own
			// goroutine: the response is not held up. A request arriving
			// meanwhile joins the interval.
			b.closing = true
			b.n++
			go func() {
				if heavy {
					b.collect()
				}
				if b.settle != nil {
					b.settle()
				}
				b.leave(true, heavy)
			}()
			return
		}
	}
	b.joined = false
	cpu, _ := b.meter()
	b.wall += b.now().Sub(b.since)
	b.cpu += max(0, cpu-b.cpuSince)
}

// Collections returns how many busy intervals ended with a collection.
func (b *Busy) Collections() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.collected
}

// totals returns the wall and CPU time spent busy so far, with the
// current interval up to now and cpu (the meter read now).
func (b *Busy) totals(now time.Time, cpu time.Duration) (wall, busyCPU time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wall, busyCPU = b.wall, b.cpu
	if b.n > 0 {
		wall += now.Sub(b.since)
		busyCPU += max(0, cpu-b.cpuSince)
	}
	return wall, busyCPU
}
