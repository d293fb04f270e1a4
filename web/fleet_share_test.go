package web

import (
	"context"
	"math"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	cfixture "github.com/heatscope/heatscope/internal/fixture"
	"github.com/heatscope/heatscope/internal/sharecheck"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/recorder"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/symbolize"
)

// trimmedTime is sharecheck.Trimmed for node's samples in db: per CPU
// and column, the CPU time (seconds) that spreading trims from the samples
// in the column, as a sample weighs its period but stands for no time
// before the same CPU's previous sample (store.Since).
func trimmedTime(t *testing.T, db *store.DB, node string) sharecheck.Trimmed {
	return func(start time.Time, step time.Duration, columns int) map[uint32][]float64 {
		return trimmedIn(t, db, node, start, step, columns)
	}
}

// trimmedIn is trimmedTime's answer for columns of step from start.
func trimmedIn(t *testing.T, db *store.DB, node string, start time.Time, step time.Duration, columns int) map[uint32][]float64 {
	t.Helper()
	out := map[uint32][]float64{}
	var last store.LastSample
	r := store.Range{From: start.UnixNano(), To: start.Add(time.Duration(columns) * step).UnixNano()}
	_, err := db.Select(context.Background(), r, &store.Filter{Nodes: []string{node}}, func(b *store.Batch) error {
		w := b.Weight()
		for _, i := range b.Rows {
			ts, cpu := b.T.Time[i], b.T.CPU[i]
			if out[cpu] == nil {
				out[cpu] = make([]float64, columns)
			}
			out[cpu][(ts-r.From)/int64(step)] += float64(w-(ts-store.Since(ts, w, last.Swap(cpu, ts)))) / 1e9
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pinnedSynth records, as node, a 2-CPU machine whose CPUs never idle,
// sampled by internal/synth (timer jitter and all) at 99 Hz, then 24 Hz,
// then 99 Hz again as the overhead guard would, from start for seconds in
// three equal parts (each CPU's samples in time order: a part starts a
// millisecond after the one before, past its last tick's jitter), into
// blocks of 20 s and a head.
func pinnedSynth(t *testing.T, node string, start time.Time, seconds float64) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Source: node, Node: node, PeriodNs: sample.PeriodOf(99),
		BlockDuration: 20 * time.Second, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	at := start.UnixNano()
	for k, hz := range []int{99, 24, 99} {
		db.SetPeriod(sample.PeriodOf(int64(hz)))
		g := synth.New(synth.Config{CPUs: 2, Hz: hz, Start: at, Seconds: seconds / 3, IdleShare: 1e-9, Seed: uint64(k + 1)})
		if err := g.Feed(func(s *sample.Sample) error { return db.Append(s) }); err != nil {
			t.Fatal(err)
		}
		at += int64(seconds/3*1e9) + int64(time.Millisecond)
	}
	return db
}

// TestFleetOverviewShareAtMostOne: a CPU busy all the time is at most 1
// busy in every cell of the overview, at steps of 1, 7, 10, 13 and 20 s
// over a range that starts off every step, with the sampling rate
// changing, and each cell is the CPU time /api/percpu gives that CPU over
// the wall time the cell covers. Before the overview spread a sample's
// period over the time before it, a 1 s step with 100 samples at 99 Hz
// held 1.0101 s of one CPU.
func TestFleetOverviewShareAtMostOne(t *testing.T) {
	start := time.Unix(fleetStart/1e9, 0).Add(3300 * time.Millisecond)
	db := pinnedSynth(t, "node-a", start, 90)
	fx := newFixture(t, db, Options{})
	from, to := start.Add(-1700*time.Millisecond), start.Add(91*time.Second)
	highest := sharecheck.Shares(t, fx.url, "node-a", from, to, time.Second/24, trimmedTime(t, db, "node-a"))
	if highest < 0.99 {
		t.Errorf("highest busiest share %.4f: the CPUs never idle, want about 1", highest)
	}
}

// TestFleetOverviewNewestColumn: the newest column, which the data cover
// in part (a live node's head, a block still to come), is the busiest
// CPU's time over the part they cover, marked partial with its seconds:
// divided by the whole step, a CPU busy all along looked 25% busy in a
// 2-minute column it had 30 s of, and the 5 columns of a 90 s recording
// drawn at 2 minutes (the 0.0859) idle.
func TestFleetOverviewNewestColumn(t *testing.T) {
	start := time.Unix(fleetStart/1e9/120*120, 0).Add(30 * time.Second)
	db := pinnedSynth(t, "node-a", start, 90)
	fx := newFixture(t, db, Options{})
	for _, q := range []string{"step=2m", "columns=5", "step=10s"} {
		ov := getOverview(t, fx, q)
		n := ov.Nodes[0]
		for i, share := range n.Busiest {
			if share < 0.99 || share > 1 {
				t.Errorf("%s: column %d of %d: busiest CPU %.4f busy, want about 1 (its CPUs never idle); partial %+v", q, i, ov.Columns, share, n.Partial)
			}
		}
		last := ov.Columns - 1
		if len(n.Partial) == 0 || n.Partial[len(n.Partial)-1].Column != last {
			t.Errorf("%s: partial columns %+v, want the newest, %d, among them", q, n.Partial, last)
			continue
		}
		// The data end at the last sample, 90 s (and the 2 ms the three
		// parts are apart) after start, less a 99 Hz period.
		colStart := ov.Start + float64(last)*ov.Step
		end := float64(start.UnixNano())/1e9 + 90.002
		if got := n.Partial[len(n.Partial)-1].Seconds; math.Abs(got-(end-colStart)) > 0.011 {
			t.Errorf("%s: newest column covers %.6f s, want %.6f s (from %.3f to the last sample)", q, got, end-colStart, colStart)
		}
	}
}

// pinnedLoopSource spins on the CPU given as its first argument for the
// seconds given as its second.
const pinnedLoopSource = `#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(atoi(argv[1]), &set);
	if (sched_setaffinity(0, sizeof set, &set)) return 1;
	time_t end = time(0) + atoi(argv[2]);
	volatile unsigned long n = 0;
	while (time(0) < end) for (int i = 0; i < 1000000; i++) n++;
	return 0;
}
`

// TestFleetOverviewShareOfARealRecording records, with the real BPF
// sampler, a loop pinned to one CPU for 15 s at 99 Hz, lowered to 24 Hz
// after 5 s and raised back after 10 s as the overhead guard does (the
// store's period following each sample's time as record's does), into
// blocks of 4 s and a head; then checks the overview's cells as
// TestFleetOverviewShareAtMostOne does.
func TestFleetOverviewShareOfARealRecording(t *testing.T) {
	bpftest.Require(t)
	bin := cfixture.BuildC(t, "", "gcc", "pinned", pinnedLoopSource, "-O1")
	cpu := runtime.NumCPU() - 1
	loop := exec.Command(bin, strconv.Itoa(cpu), "30")
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		loop.Process.Kill()
		loop.Wait()
	})
	rec, err := recorder.Open(profiler.Config{Frequency: 99, PIDs: []uint32{uint32(loop.Process.Pid)}, Stacks: profiler.StacksUser},
		symbolize.Options{}, discard())
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	db, err := store.Open(t.TempDir(), store.Options{Source: "real", Node: "real", PeriodNs: rec.PeriodNs(),
		BlockDuration: 4 * time.Second, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	go func() {
		for _, hz := range []int{24, 99} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			if err := rec.SetFrequency(hz); err != nil {
				t.Errorf("set frequency %d Hz: %v", hz, err)
			}
		}
	}()
	period := rec.PeriodNs()
	var first, last int64
	var samples int
	err = rec.Run(ctx, func(s *sample.Sample) {
		if p := rec.PeriodAt(s.Time); p != period && p == rec.PeriodNs() {
			period = p
			db.SetPeriod(p)
		}
		if err := db.Append(s); err != nil {
			t.Error(err)
		}
		if samples == 0 {
			first = s.Time
		}
		last = max(last, s.Time)
		samples++
	})
	if err != nil {
		t.Fatal(err)
	}
	if samples < 100 {
		t.Fatalf("%d samples of a loop pinned to CPU %d for 15 s: the sampler missed it", samples, cpu)
	}
	fx := newFixture(t, db, Options{})
	from := time.UnixMilli(first/1e6 - 300)
	to := time.UnixMilli(last/1e6 + 500)
	highest := sharecheck.Shares(t, fx.url, "real", from, to, time.Second/24, trimmedTime(t, db, "real"))
	t.Logf("%d samples from %s to %s; highest busiest share %.4f", samples, time.Unix(0, first).UTC().Format(time.RFC3339Nano),
		time.Unix(0, last).UTC().Format(time.RFC3339Nano), highest)
}
