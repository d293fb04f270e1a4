package overview

import (
	"context"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestOverviewFiltersPythonFrames: the overview's frame filter keeps the
// samples with a Python function, matched by its qualified name or by its
// file, and leaves out the node where none ran.
func TestOverviewFiltersPythonFrames(t *testing.T) {
	period := sample.PeriodOf(100)
	start := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC).UnixNano()
	var sources []store.BlockSource
	for _, node := range []string{"gpu-1", "web-1"} {
		dir := t.TempDir()
		db, err := store.Open(dir, store.Options{Source: node, Node: node, PeriodNs: period, BlockDuration: time.Hour,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 { // 10 s: gpu-1 runs Python in 4 of every 10 samples
			s := sample.Sample{Time: start + int64(i)*period, PID: 7, TID: 7, Comm: "app",
				Stack: []sample.Frame{{Function: "work", Module: "/usr/bin/app", Address: 0x10, Kind: sample.KindUser}}}
			if node == "gpu-1" && i%10 < 4 {
				s.Comm, s.Stack = "python3", []sample.Frame{
					{Function: "Trainer.step", Module: "/srv/trainer.py", Kind: sample.KindPython, Line: 31 + uint32(i%2), StartLine: 30},
					{Function: "<module>", Module: "/srv/train.py", Kind: sample.KindPython, Line: 9, StartLine: 1},
					{Function: "Py_RunMain", Module: "/usr/bin/python3.11", Address: 0x251000, Kind: sample.KindUser}}
			}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		sources = append(sources, store.DirSource(dir))
	}
	fleet, err := store.OpenReader(sources, store.ReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	r := store.Range{From: start, To: start + 10*int64(time.Second)}
	for _, re := range []string{`^Trainer\.step$`, `trainer\.py\)$`} {
		f := &store.Filter{Frame: regexp.MustCompile(re)}
		ov, _, err := Build(context.Background(), fleet, NewCells(0, 0), Request{Range: r, Step: 10 * int64(time.Second), Filter: f, SampleFilter: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(ov.Nodes) != 1 || ov.Nodes[0].Name != "gpu-1" || ov.Hidden != 1 || ov.Nodes[0].Samples[0] != 400 ||
			ov.Nodes[0].CPU[0] < 3.99 || ov.Nodes[0].CPU[0] > 4.01 {
			t.Errorf("frame=%s: %d nodes (%+v), %d hidden; want gpu-1 alone with 400 samples, 4 cpu-seconds", re, len(ov.Nodes), ov.Nodes, ov.Hidden)
		}
	}
}
