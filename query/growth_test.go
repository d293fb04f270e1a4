package query

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestGrowthOf: B is 1 s, A is 2 s; B's CPU time is doubled before it
// is subtracted, so steady work shows no growth and a burst does.
func TestGrowthOf(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const base = int64(1795237380) * int64(time.Second)
	add := func(from int64, n int, leaf string) {
		for i := range n {
			s := sample.Sample{Time: from + int64(i)*int64(time.Millisecond), PID: 1, TID: 1, Comm: "app",
				Stack: []sample.Frame{{Function: leaf, Kind: sample.KindKernel}, {Function: "main", Kind: sample.KindUser}}}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(base, 10, "steady")         // B: [base, base+1s)
	add(base+1e8, 5, "shrinks")     //
	add(base+1e9, 20, "steady")     // A: [base+1s, base+3s)
	add(base+1e9+1e8, 4, "shrinks") //
	add(base+2e9, 30, "burst")      //
	g, _, err := GrowthOf(context.Background(), db, store.Range{From: base + 1e9, To: base + 3e9}, store.Range{From: base, To: base + 1e9}, &store.Filter{}, ByTotal, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	// One period throughout: every CPU time is a count times it.
	cpu := func(n int64) float64 { return seconds(n * store.DefaultPeriodNs) }
	type row struct {
		name, kind                             string
		self, total, self2, total2             int64
		selfCPU, totalCPU, selfCPU2, total2CPU float64
		deltaSelf, deltaTotal                  float64
		via                                    string
		deltaVia                               float64
	}
	want := []row{
		{"burst", "kernel", 30, 30, 0, 0, cpu(30), cpu(30), 0, 0, cpu(30), cpu(30), "", 0},
		// main's growth is all burst's (steady's call did not grow,
		// shrinks' shrank): a pass-through.
		{"main", "user", 0, 54, 0, 15, 0, cpu(54), 0, cpu(15), 0, cpu(24), "burst", cpu(30)},
		{"steady", "kernel", 20, 20, 10, 10, cpu(20), cpu(20), cpu(10), cpu(10), 0, 0, "", 0},
		{"shrinks", "kernel", 4, 4, 5, 5, cpu(4), cpu(4), cpu(5), cpu(5), cpu(-6), cpu(-6), "", 0},
	}
	if g.Samples != 54 || g.Samples2 != 15 || g.CPU != cpu(54) || g.CPU2 != cpu(15) || g.Unit != UnitCPUSeconds || len(g.Functions) != len(want) {
		t.Fatalf("growth %+v", g)
	}
	for i, w := range want {
		f := g.Functions[i]
		got := row{f.Name, f.Kind, f.Self, f.Total, f.Self2, f.Total2, f.SelfCPU, f.TotalCPU, f.SelfCPU2, f.TotalCPU2,
			f.DeltaSelfCPU, f.DeltaTotalCPU, f.Via, f.DeltaViaCPU}
		if got != w {
			t.Errorf("row %d: %+v, want %+v", i, got, w)
		}
	}
}

// TestGrowthPassThrough: a chain of callers each calling the next is
// marked a pass-through down to the function where the growth splits;
// that one and a caller with work of its own are not; BySelf ranks the
// leaves.
func TestGrowthPassThrough(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const base = int64(1795237380) * int64(time.Second)
	at := base
	add := func(n int, stack ...string) { // the root first
		for range n {
			s := sample.Sample{Time: at, PID: 1, TID: 1, Comm: "app"}
			for i := len(stack) - 1; i >= 0; i-- {
				s.Stack = append(s.Stack, sample.Frame{Function: stack[i], Kind: sample.KindKernel})
			}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			at += int64(time.Millisecond)
		}
	}
	add(10, "entry", "other") // B: [base, base+1s)
	at = base + 1e9           // A: [base+1s, base+2s)
	add(10, "entry", "other")
	add(50, "entry", "syscall", "dispatch", "stat_show", "format", "printf")
	add(5, "entry", "syscall", "dispatch", "stat_show", "format")
	add(3, "entry", "syscall", "dispatch", "stat_show", "flush")
	add(40, "entry", "syscall", "dispatch", "walk", "walk", "lookup")
	add(2, "entry", "syscall")
	for _, order := range []GrowthOrder{ByTotal, BySelf} {
		g, _, err := GrowthOf(context.Background(), db, store.Range{From: base + 1e9, To: base + 2e9}, store.Range{From: base, To: base + 1e9}, &store.Filter{}, order, GroupAddresses)
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			name                  string
			deltaSelf, deltaTotal int64
			via                   string
			deltaVia              int64
		}
		var got []row
		period := float64(store.DefaultPeriodNs) / 1e9
		samples := func(sec float64) int64 { return int64(math.Round(sec / period)) } // one period throughout
		for _, f := range g.Functions {
			got = append(got, row{f.Name, samples(f.DeltaSelfCPU), samples(f.DeltaTotalCPU), f.Via, samples(f.DeltaViaCPU)})
		}
		rows := map[string]row{
			"entry":     {"entry", 0, 100, "syscall", 100},   // 100 of 100 through syscall
			"syscall":   {"syscall", 2, 100, "dispatch", 98}, // 98 of 100
			"dispatch":  {"dispatch", 0, 98, "", 0},          // 58 and 40: the growth splits
			"stat_show": {"stat_show", 0, 58, "format", 55},  // 55 of 58 (95%)
			"format":    {"format", 5, 55, "printf", 50},     // 50 of 55 (91%)
			"printf":    {"printf", 50, 50, "", 0},           //
			"walk":      {"walk", 0, 40, "lookup", 40},       // its recursive call is not a callee
			"lookup":    {"lookup", 40, 40, "", 0},           //
			"flush":     {"flush", 3, 3, "", 0},              //
			"other":     {"other", 0, 0, "", 0},              // no growth: no pass-through
		}
		names := []string{"syscall", "entry", "dispatch", "stat_show", "format", "printf", "lookup", "walk", "flush", "other"}
		if order == BySelf {
			names = []string{"printf", "lookup", "format", "flush", "syscall", "entry", "dispatch", "stat_show", "walk", "other"}
		}
		var want []row
		for _, n := range names {
			want = append(want, rows[n])
		}
		if !slices.Equal(got, want) {
			t.Errorf("order %d:\n got %v\nwant %v", order, got, want)
		}
	}
}
