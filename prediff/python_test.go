package prediff

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestComparePythonFunction: a Python function that runs only before each
// event is compared as any function: named "qualname (file)" of kind
// python, its lines added up, it tops the table having grown before both
// events, the focus on it counts its time per event, and another file's
// function of the same qualified name stays apart.
func TestComparePythonFunction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	period := sample.PeriodOf(100)
	db, err := store.Open(dir, store.Options{Source: "n1", Node: "n1", PeriodNs: period, BlockDuration: 2 * time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	py := func(fn, file string, line, start uint32) sample.Frame {
		return sample.Frame{Function: fn, Module: file, Kind: sample.KindPython, Line: line, StartLine: start}
	}
	interp := sample.Frame{Function: "Py_RunMain", Module: "/usr/bin/python3.11", Address: 0x251000, Kind: sample.KindUser}
	// Trainer.step of trainer.py runs before each event, at two lines;
	// Trainer.step of another file all along.
	culprit := func(line uint32) []sample.Frame {
		return []sample.Frame{py("Trainer.step", "/srv/trainer.py", line, 30), py("<module>", "/srv/train.py", 9, 1), interp}
	}
	steady := []sample.Frame{py("Trainer.step", "/srv/other/trainer.py", 12, 10), py("<module>", "/srv/other/run.py", 3, 1), interp}
	start := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC).UnixNano()
	eventsAt := []int64{start + 20*int64(time.Second), start + 40*int64(time.Second)}
	burst := func(t int64) bool {
		for _, e := range eventsAt {
			if t >= e-2*int64(time.Second) && t < e {
				return true
			}
		}
		return false
	}
	for tick, i := start, 0; tick < start+60*int64(time.Second); tick, i = tick+period, i+1 {
		s := sample.Sample{Time: tick, CPU: 0, PID: 100, TID: 100, Comm: "python3", Stack: steady}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		if burst(tick) {
			s := sample.Sample{Time: tick, CPU: 1, PID: 200, TID: 200, Comm: "python3", Stack: culprit(31 + uint32(i%3))}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, at := range eventsAt {
		if err := db.AppendEvent(events.Event{Time: at, Source: "test", Severity: events.Warning, Text: "reset",
			Labels: map[string]string{events.KindLabel: "ena-reset"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(dir, store.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	const step = "Trainer.step (/srv/trainer.py)"
	res, _, err := Compare(context.Background(), db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all(), Table: true, Tree: true,
		Focus: &Func{Name: step, Kind: "python"}})
	if err != nil || len(res.Events) != 2 {
		t.Fatalf("compare: %d events (%v)", len(res.Events), err)
	}
	top := res.Functions[0]
	if top.Name != step || top.Kind != "python" || top.Grew != 2 || top.A != 4*sec || top.B != 0 || top.SelfA != 4*sec {
		t.Errorf("top grower %+v, want %s of kind python, 4 cpu-seconds before 2 events, none the windows before", top, step)
	}
	other := find(res.Functions, "Trainer.step (/srv/other/trainer.py)")
	if other == nil || other.Kind != "python" || other.A != other.B || other.Grew != 0 {
		t.Errorf("the other file's Trainer.step: %+v, want a row of its own, unchanged", other)
	}
	for _, e := range res.Events {
		if e.FocusA != 2*sec || e.FocusB != 0 {
			t.Errorf("event at %d: focus A %d B %d, want 2 and 0 cpu-seconds", e.Time, e.FocusA, e.FocusB)
		}
	}
}
