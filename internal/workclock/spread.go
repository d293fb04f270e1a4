package workclock

import (
	"sync"
	"time"
)

// Spread adds up the CPU time of units of work done in bursts, each
// spread evenly over the time it serves, from its end on: a block of two
// minutes of samples written in 80 ms counts 80 ms over the two minutes
// after it, the share of a CPU it costs, rather than 80 ms at once. The
// zero value is ready; it is safe for concurrent use.
type Spread struct {
	mu      sync.Mutex
	settled time.Duration // the units spread out in full
	pending []spreadUnit
}

// spreadUnit is a unit still being spread out.
type spreadUnit struct {
	end       time.Time
	cpu, over time.Duration
}

// Add adds a unit of cpu that ended at end and serves the time over
// after it (0: counted at once).
func (s *Spread) Add(end time.Time, cpu, over time.Duration) {
	if cpu <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if over <= 0 {
		s.settled += cpu
		return
	}
	s.pending = append(s.pending, spreadUnit{end: end, cpu: cpu, over: over})
}

// Total returns the CPU time counted by now: the units spread out in
// full, and of the others the share of their time passed.
func (s *Spread) Total(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.settled
	kept := s.pending[:0]
	for _, u := range s.pending {
		passed := now.Sub(u.end)
		switch {
		case passed >= u.over:
			s.settled += u.cpu
			total += u.cpu
			continue
		case passed > 0:
			total += time.Duration(float64(u.cpu) * float64(passed) / float64(u.over))
		}
		kept = append(kept, u)
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	return total
}
