package profiler

import (
	"golang.org/x/sys/unix"
)

// WallClock converts CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) into
// wall-clock Unix nanoseconds.
type WallClock struct {
	offset int64
}

// NewWallClock returns a clock whose offset has been measured once.
func NewWallClock() *WallClock {
	c := &WallClock{}
	c.Measure()
	return c
}

// Measure re-measures the offset between CLOCK_REALTIME and CLOCK_MONOTONIC.
// It reads the realtime clock between two monotonic reads, a few times, and
// keeps the tightest bracket, so the offset is good to about a microsecond.
func (c *WallClock) Measure() {
	best := int64(-1)
	for range 5 {
		var m1, r, m2 unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1)
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2)
		width := m2.Nano() - m1.Nano()
		if best < 0 || width < best {
			best = width
			c.offset = r.Nano() - (m1.Nano()+m2.Nano())/2
		}
	}
}

// Wall converts a CLOCK_MONOTONIC time to Unix nanoseconds.
func (c *WallClock) Wall(monotonicNs uint64) int64 {
	return int64(monotonicNs) + c.offset
}
