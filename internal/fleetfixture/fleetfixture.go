// Package fleetfixture writes small fleets with known answers for tests of
// the fleet views: each node's data directory, written by the store as a
// recorder would, holding a steady load, events, and on some nodes a
// culprit function that runs only in the seconds before each event; and
// their upload to a bucket as the shipper lays it out.
package fleetfixture

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Start is when every fixture node's samples start: 2026-11-20 00:00:00
// UTC. Seconds is how long they last.
const (
	Start   = int64(1795132800) * int64(time.Second)
	Seconds = 60
)

// The fixture's functions and commands.
const (
	// Culprit is the kernel function the culprit command runs in before
	// each event, under CulpritCaller.
	Culprit       = "memcg_stat_show"
	CulpritCaller = "seq_read_iter"
	CulpritComm   = "kubelet"
	// Steady is the user function that runs all the time, in SteadyComm.
	Steady     = "steady_work"
	SteadyMain = "main"
	SteadyComm = "app"
)

// Node describes one fixture node.
type Node struct {
	Name   string
	Labels map[string]string
	// Hz is its sampling rate: a sample every 1/Hz s of CPU time.
	Hz int
	// Events are the offsets, from Start, of its events, each of Kind.
	Events []time.Duration
	Kind   string
	// Culprit makes CulpritComm run Culprit on CPU 1 in the CulpritFor
	// before each event, at Hz; the steady load runs on CPU 0 all along.
	Culprit    bool
	CulpritFor time.Duration
}

// Write writes node's data directory under dir (dir/<name>) and returns
// it: Seconds of the steady load, the culprit's bursts, and the events
// (source "test", label kind=Kind), as one block.
func Write(t testing.TB, dir string, n Node) string {
	t.Helper()
	path := filepath.Join(dir, n.Name)
	period := sample.PeriodOf(int64(n.Hz))
	db, err := store.Open(path, store.Options{Source: n.Name, Node: n.Name, NodeLabels: n.Labels, PeriodNs: period,
		BlockDuration: 2 * time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	steady := []sample.Frame{
		{Function: Steady, Module: "/usr/bin/app", Address: 0x1100, Kind: sample.KindUser},
		{Function: SteadyMain, Module: "/usr/bin/app", Address: 0x1000, Kind: sample.KindUser},
	}
	culprit := []sample.Frame{
		{Function: Culprit, Module: "[kernel.kallsyms]", Address: 0xffffffff81300000, Kind: sample.KindKernel},
		{Function: CulpritCaller, Module: "[kernel.kallsyms]", Address: 0xffffffff81200000, Kind: sample.KindKernel},
	}
	// Samples go in time order: the steady load's ticks with the
	// culprit's beside them.
	burst := func(t int64) bool {
		for _, e := range n.Events {
			at := Start + int64(e)
			if t >= at-int64(n.CulpritFor) && t < at {
				return true
			}
		}
		return false
	}
	for tick := Start; tick < Start+Seconds*int64(time.Second); tick += period {
		s := sample.Sample{Time: tick, CPU: 0, PID: 100, TID: 100, Comm: SteadyComm, Stack: steady}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		if n.Culprit && burst(tick) {
			s := sample.Sample{Time: tick, CPU: 1, PID: 200, TID: 201, Comm: CulpritComm, Stack: culprit}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, e := range n.Events {
		ev := events.Event{Time: Start + int64(e), Source: "test", Severity: events.Warning,
			Text: n.Kind + " on " + n.Name, Labels: map[string]string{events.KindLabel: n.Kind}}
		if err := db.AppendEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Upload copies a node's data directory into bkt as its shipper would:
// each block's data then meta.json, its event segments by their old names
// (no instance), which readers still read.
func Upload(t testing.TB, bkt *bucket.Bucket, node, path string) {
	t.Helper()
	miniotest.UploadBlocks(t, bkt, node, path)
	miniotest.UploadSegments(t, bkt, node, path)
}

// Fleet is the standard fixture: four nodes, 60 s each.
//
//   - n1 (zone a, 100 Hz): ena-reset at 20 s and 40 s, the culprit for 2 s
//     before each;
//   - n2 (zone b, 50 Hz): ena-reset at 25 s and 45 s, the culprit for 2 s
//     before each;
//   - n3 (zone a, 100 Hz): healthy, one cpu-saturation event at 30 s;
//   - n4 (zone b, 100 Hz): healthy, no event.
//
// With a window of 2 s, each ena-reset's A holds 2 cpu-seconds of the
// culprit and 2 of the steady load, its B 2 of the steady load: in all, A
// 16 and B 8 cpu-seconds, the culprit grew before 4 of 4 resets on 2
// nodes. n2 samples at half n1's rate, so counting samples instead of
// CPU time gives other figures.
func Fleet() []Node {
	return []Node{
		{Name: "n1", Labels: map[string]string{"zone": "a"}, Hz: 100, Kind: "ena-reset",
			Events: []time.Duration{20 * time.Second, 40 * time.Second}, Culprit: true, CulpritFor: 2 * time.Second},
		{Name: "n2", Labels: map[string]string{"zone": "b"}, Hz: 50, Kind: "ena-reset",
			Events: []time.Duration{25 * time.Second, 45 * time.Second}, Culprit: true, CulpritFor: 2 * time.Second},
		{Name: "n3", Labels: map[string]string{"zone": "a"}, Hz: 100, Kind: "cpu-saturation",
			Events: []time.Duration{30 * time.Second}},
		{Name: "n4", Labels: map[string]string{"zone": "b"}, Hz: 100},
	}
}

// WriteFleet writes every node of nodes under dir and uploads it to bkt.
func WriteFleet(t testing.TB, bkt *bucket.Bucket, dir string, nodes []Node) {
	t.Helper()
	for _, n := range nodes {
		Upload(t, bkt, n.Name, Write(t, dir, n))
	}
}
