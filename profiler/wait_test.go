package profiler

import (
	"testing"
	"time"
)

// A timerfd re-arms only when it is read: a waiter that did not read it
// would wake once and then never again, and the ring would be read only
// when a new process forced a wakeup.
func TestPollTimerKeepsFiring(t *testing.T) {
	const interval = 20 * time.Millisecond
	w, err := newPollTimer(interval)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	woke := make(chan error)
	go func() {
		for {
			err := w.wait()
			woke <- err
			if err != nil {
				return
			}
		}
	}()
	for i := range 5 {
		select {
		case err := <-woke:
			if err != nil {
				t.Fatalf("wait %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the poll timer stopped after %d expiries of %v", i, interval)
		}
	}
	w.close()
	for err := range woke {
		if err != nil {
			return // close ended the wait
		}
	}
}
