package overhead

import (
	"sync"
	"time"
)

// Busy measures the agent's CPU and wall time spent while it serves
// queries (someone browsing the recorder's own UI), so that the Guard can
// judge the sampling path alone: a person looking at what is recorded must
// not change how it is recorded. An interval starts when the first of
// the requests under way starts and ends when the last ends; overlapping
// requests count once.
type Busy struct {
	meter CPUMeter
	now   func() time.Time

	mu       sync.Mutex
	n        int           // requests under way
	since    time.Time     // start of the current busy interval
	cpuSince time.Duration // meter at its start
	wall     time.Duration // closed intervals' wall time
	cpu      time.Duration // and CPU
}

// NewBusy returns a Busy that reads the agent's CPU with meter (the Guard's).
func NewBusy(meter CPUMeter) *Busy { return &Busy{meter: meter, now: time.Now} }

// Enter marks the start of a request.
func (b *Busy) Enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	if b.n == 1 {
		b.since = b.now()
		b.cpuSince, _ = b.meter()
	}
}

// Leave marks the end of a request Enter started.
func (b *Busy) Leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n--
	if b.n == 0 {
		cpu, _ := b.meter()
		b.wall += b.now().Sub(b.since)
		b.cpu += max(0, cpu-b.cpuSince)
	}
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
