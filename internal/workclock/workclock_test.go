package workclock

import (
	"sync"
	"testing"
	"time"
)

// spin uses about d of CPU.
func spin(d time.Duration) {
	start := threadNs()
	for threadNs()-start < int64(d) {
	}
}

func TestClockCountsCPUNotSleep(t *testing.T) {
	var c Clock
	s := c.Start()
	spin(20 * time.Millisecond)
	time.Sleep(50 * time.Millisecond) // off the CPU: not counted
	s.Stop()
	if got := c.Total(); got < 20*time.Millisecond || got >= 45*time.Millisecond {
		t.Errorf("a unit that spun 20 ms and slept 50 ms counted %v", got)
	}
	if c.Units() != 1 {
		t.Errorf("%d units, want 1", c.Units())
	}
}

func TestClockConcurrentUnitsAddUp(t *testing.T) {
	var c Clock
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s := c.Start()
			spin(10 * time.Millisecond)
			s.Stop()
		})
	}
	wg.Wait()
	if got := c.Total(); got < 40*time.Millisecond {
		t.Errorf("four units of 10 ms of CPU each counted %v", got)
	}
	if c.Units() != 4 {
		t.Errorf("%d units, want 4", c.Units())
	}
}

// TestSpread: a unit spread over the time it serves counts in proportion
// to the time passed since it ended, in full once that time has passed;
// a unit spread over nothing counts at once.
func TestSpread(t *testing.T) {
	var s Spread
	t0 := time.Unix(1000, 0)
	s.Add(t0, 120*time.Millisecond, 2*time.Minute) // a block of 2 minutes
	s.Add(t0, 5*time.Millisecond, 0)               // a WAL write
	for _, c := range []struct {
		at   time.Duration
		want time.Duration
	}{
		{-time.Second, 5 * time.Millisecond},
		{0, 5 * time.Millisecond},
		{10 * time.Second, 15 * time.Millisecond},
		{time.Minute, 65 * time.Millisecond},
		{2 * time.Minute, 125 * time.Millisecond},
		{time.Hour, 125 * time.Millisecond},
	} {
		if got := s.Total(t0.Add(c.at)); got != c.want {
			t.Errorf("at %v: %v, want %v", c.at, got, c.want)
		}
	}
	if len(s.pending) != 0 {
		t.Errorf("%d units still pending after their time passed", len(s.pending))
	}
}
