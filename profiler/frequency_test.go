package profiler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// TestSetFrequency changes the period of the running events in place and
// checks that the samples of a spinning process follow: as many as its CPU
// time at 50 Hz, then at 400 Hz, with nothing lost or re-opened.
func TestSetFrequency(t *testing.T) {
	bpftest.Require(t)
	spin := startSpinner(t, "spin-freq")
	pid := uint32(spin.Process.Pid)
	p, err := Open(Config{Frequency: 50, PIDs: []uint32{pid}})
	if err != nil {
		t.Fatalf("open profiler: %v", err)
	}
	defer p.Close()
	if err := p.SetFrequency(0); err == nil {
		t.Error("SetFrequency(0) succeeded")
	}
	if err := p.SetFrequency(MaxFrequency + 1); err == nil {
		t.Errorf("SetFrequency(%d) succeeded", MaxFrequency+1)
	}
	var mu sync.Mutex
	var times []int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, func(_ *Record, wall int64) {
			mu.Lock()
			times = append(times, wall)
			mu.Unlock()
		})
	}()

	// phase returns the time span of d from now and the CPU time the
	// spinner used in it; the samples in the span are counted at the end.
	type span struct {
		from, to int64
		cpu      time.Duration
	}
	phase := func(d time.Duration) span {
		c0, from := bpftest.ProcessCPU(t, int(pid)), time.Now().UnixNano()
		time.Sleep(d)
		return span{from, time.Now().UnixNano(), bpftest.ProcessCPU(t, int(pid)) - c0}
	}
	time.Sleep(300 * time.Millisecond)
	slow := phase(3 * time.Second)
	if err := p.SetFrequency(400); err != nil {
		t.Fatalf("SetFrequency(400): %v", err)
	}
	if p.Frequency() != 400 {
		t.Errorf("Frequency() = %d after SetFrequency(400)", p.Frequency())
	}
	time.Sleep(100 * time.Millisecond) // the old period's last interval
	fast := phase(3 * time.Second)
	time.Sleep(300 * time.Millisecond) // the last poll
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost != 0 {
		t.Errorf("%d samples lost", st.Lost)
	}
	// ±15% and three samples cover the 10 ms granularity of the CPU times
	// and the clock reads around each phase.
	for _, c := range []struct {
		hz float64
		s  span
	}{{50, slow}, {400, fast}} {
		n := 0
		for _, w := range times {
			if w >= c.s.from && w < c.s.to {
				n++
			}
		}
		want := c.s.cpu.Seconds() * c.hz
		t.Logf("%v Hz: %d samples, spinner CPU %v: want %.0f", c.hz, n, c.s.cpu, want)
		if got := float64(n); want < 20 || got < want*0.85-3 || got > want*1.15+3 {
			t.Errorf("at %v Hz: %d samples while the spinner used %v of CPU, want %.0f ±15%%", c.hz, n, c.s.cpu, want)
		}
	}
}
