// Package wallclock turns CLOCK_MONOTONIC times (the BPF program's
// bpf_ktime_get_ns, the kernel log's stamps) into wall-clock Unix
// nanoseconds.
package wallclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock converts CLOCK_MONOTONIC nanoseconds into wall-clock Unix
// nanoseconds.
//
// Measuring costs real clock_gettime syscalls (x/sys/unix does not use the
// vDSO), and every syscall wakes the Go runtime's sysmon thread: measured
// on every 100 ms poll, they were the agent's largest steady-state cost.
// The offset moves only when the wall clock is stepped, so it is
// re-measured every MeasureInterval.
type Clock struct {
	offset   int64
	measured time.Time
}

// MeasureInterval is how often MaybeMeasure re-measures the offset.
const MeasureInterval = 10 * time.Second

// New returns a clock whose offset has been measured once.
func New() *Clock {
	c := &Clock{}
	c.Measure()
	return c
}

// Measure re-measures the offset between CLOCK_REALTIME and CLOCK_MONOTONIC.
// It reads the realtime clock between two monotonic reads, a few times, and
// keeps the tightest bracket, so the offset is good to about a microsecond.
func (c *Clock) Measure() {
	c.measured = time.Now()
	best := int64(-1)
	for range 3 {
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

// MaybeMeasure re-measures the offset when MeasureInterval has passed.
func (c *Clock) MaybeMeasure() {
	if time.Since(c.measured) >= MeasureInterval {
		c.Measure()
	}
}

// Wall converts a CLOCK_MONOTONIC time to Unix nanoseconds.
func (c *Clock) Wall(monotonicNs int64) int64 {
	return monotonicNs + c.offset
}
