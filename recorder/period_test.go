package recorder

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/symbolize"
)

// TestPeriodAfterARaise samples every CPU at 2 Hz, raises the rate to
// 99 Hz as the overhead guard does, and weighs each sample with PeriodAt
// as record does: in the 400 ms after the raise no CPU's samples stand
// for more CPU time than the 400 ms (and the periods of the samples at
// its ends). The kernel restarts each CPU's timer at the new period, so
// those samples close 10 ms each; weighed at the old 500 ms they made a
// CPU's 400 ms hold seconds of CPU time.
func TestPeriodAfterARaise(t *testing.T) {
	bpftest.Require(t)
	rec, err := Open(profiler.Config{Frequency: 2, Stacks: profiler.StacksUser}, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	raised := make(chan error, 1)
	go func() {
		time.Sleep(1200 * time.Millisecond)
		raised <- rec.SetFrequency(99)
	}()
	type weighed struct {
		t, w int64
		cpu  uint32
	}
	var samples []weighed
	if err := rec.Run(ctx, func(s *sample.Sample) {
		samples = append(samples, weighed{s.Time, s.PeriodNs, s.CPU})
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-raised; err != nil {
		t.Fatal(err)
	}
	rec.changeMu.Lock()
	at := rec.change.at
	rec.changeMu.Unlock()
	const window = int64(400 * time.Millisecond)
	newPeriod := int64(time.Second) / 99
	perCPU, counts := map[uint32]int64{}, map[uint32]int{}
	for _, s := range samples {
		if s.t >= at && s.t < at+window {
			perCPU[s.cpu] += s.w
			counts[s.cpu]++
		}
	}
	if len(perCPU) == 0 {
		t.Fatalf("no sample in the 400 ms after the raise (%d samples in all): nothing to judge", len(samples))
	}
	for cpu, ns := range perCPU {
		if ns > window+2*newPeriod {
			t.Errorf("CPU %d: %d samples in the 400 ms after the raise from 2 to 99 Hz weigh %v of CPU time, more than the wall time",
				cpu, counts[cpu], time.Duration(ns))
		}
	}
}
