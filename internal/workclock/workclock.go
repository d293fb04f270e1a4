// Package workclock adds up the CPU time of units of work, so that the
// agent can say which of its jobs cost it what: the overhead guard names
// them when the agent is over its budget, and tells the work a lower
// sampling rate reduces from the work it does not (a new process, a new
// binary).
//
// A unit's time is its thread's CPU time (CLOCK_THREAD_CPUTIME_ID) from
// Start to Stop, with the goroutine locked to its thread between them, so
// that neither another goroutine's time nor the time the thread waited for
// a CPU on a busy machine is counted. The clock is read with a raw system
// call: it does not block, and a raw call does not wake the Go runtime's
// sysmon thread.
package workclock

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Clock is the CPU time of the units of work timed with it so far. The
// zero value is ready; it is safe for concurrent use.
type Clock struct {
	ns    atomic.Int64
	units atomic.Uint64
}

// Span is one unit of work being timed. Spans of one goroutine must not
// overlap (a unit inside another is counted twice).
type Span struct {
	c     *Clock
	start int64
}

// Start starts timing a unit of work on the calling goroutine, which stays
// on its thread until Stop.
func (c *Clock) Start() Span {
	runtime.LockOSThread()
	return Span{c: c, start: threadNs()}
}

// Stop ends the unit, adds its CPU time to the clock and returns it (0
// when the thread's clock could not be read).
func (s Span) Stop() time.Duration {
	end := threadNs()
	runtime.UnlockOSThread()
	if s.start < 0 || end < s.start {
		return 0 // the clock could not be read
	}
	s.c.ns.Add(end - s.start)
	s.c.units.Add(1)
	return time.Duration(end - s.start)
}

// Total returns the CPU time of the units timed so far.
func (c *Clock) Total() time.Duration { return time.Duration(c.ns.Load()) }

// Units returns how many units were timed so far.
func (c *Clock) Units() uint64 { return c.units.Load() }

// threadNs returns the calling thread's CPU time in nanoseconds, or -1.
func threadNs() int64 {
	var ts unix.Timespec
	_, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return -1
	}
	return ts.Nano()
}
