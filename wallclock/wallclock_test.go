package wallclock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWall converts the monotonic time of now and compares it with the
// wall clock read beside it.
func TestWall(t *testing.T) {
	c := New()
	var m unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &m); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	if d := time.Duration(c.Wall(m.Nano()) - now); d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("Wall(monotonic now) is %v from time.Now()", d)
	}
	c.measured = time.Now().Add(-MeasureInterval)
	before := c.measured
	c.MaybeMeasure()
	if !c.measured.After(before) {
		t.Error("MaybeMeasure did not measure again after MeasureInterval")
	}
}
