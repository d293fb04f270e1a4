package query

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestGrowthOf: B is 1 s, A is 2 s; B's counts are doubled before they
// are subtracted, so steady work shows no growth and a burst does.
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
	g, _, err := GrowthOf(context.Background(), db, store.Range{From: base + 1e9, To: base + 3e9}, store.Range{From: base, To: base + 1e9}, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Growth{
		{Name: "burst", Kind: "kernel", Self: 30, Total: 30, DeltaSelf: 30, DeltaTotal: 30},
		{Name: "main", Kind: "user", Self: 0, Total: 54, Total2: 15, DeltaTotal: 24},
		{Name: "steady", Kind: "kernel", Self: 20, Total: 20, Self2: 10, Total2: 10},
		{Name: "shrinks", Kind: "kernel", Self: 4, Total: 4, Self2: 5, Total2: 5, DeltaSelf: -6, DeltaTotal: -6},
	}
	if g.Samples != 54 || g.Samples2 != 15 || len(g.Functions) != len(want) {
		t.Fatalf("growth %+v", g)
	}
	for i := range want {
		if g.Functions[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, g.Functions[i], want[i])
		}
	}
}
