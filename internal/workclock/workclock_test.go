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
