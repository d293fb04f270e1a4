package query

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// handMadeScript is a perf script whose heatmap (50 rows of 20 ms) was
// worked out by hand with FlameScope's rules (app/perf/heatmap.py):
//
//	start = first sample = 1000.000000 (idle, but it still sets the start)
//	end   = last sample  = 1003.100000 -> columns = ceil(1003.1) - floor(1000.0) = 4
//	column = floor(t - 1000), row = 50 - floor(50 * (t % 1)) - 1
//
//	time         who                          cell      why
//	1000.000000  swapper + cpuidle frames     -         idle
//	1000.005000  java                         (0, 49)   50*0.005 = 0.25
//	1000.999999  java                         (0, 0)    50*0.999999 = 49.99995
//	1001.020000  java                         (1, 49)   1001.02 % 1 = 0.0199999999999818 in float64: row 49, not 48
//	1001.500000  swapper, no idle frame       (1, 24)   interrupt work on an idle CPU counts
//	1002.500000  java x3                      (2, 24)   50*0.5 = 25
//	1003.050000  java with an idle-named frame (3, 47)  not swapper, so not idle; 50*0.05 = 2.5
//	1003.100000  swapper + native_safe_halt   -         idle
const handMadeScript = `# ========
# captured on: hand
# ========
swapper     0 [000] 1000.000000: cpu-clock:
	ffffffff81a1b2c3 cpuidle_enter_state+0x9a ([kernel.kallsyms])
	ffffffff81a1b3d4 do_idle+0x1f0 ([kernel.kallsyms])

java 4242/4243 [001] 1000.005000: 10101010 cpu-clock:
	    7f0000001000 Interpreter (/usr/lib/jvm/libjvm.so)
	    7f0000002000 JavaMain (/usr/lib/jvm/libjli.so)

java 4242/4243 [001] 1000.999999: cpu-clock:
	    7f0000001000 Interpreter (/usr/lib/jvm/libjvm.so)

java 4242/4244 [000] 1001.020000: cpu-clock:
	    7f0000001000 Interpreter (/usr/lib/jvm/libjvm.so)

swapper     0 [000] 1001.500000: cpu-clock:
	ffffffff81c0ffee e1000_intr+0x10 ([kernel.kallsyms])
	ffffffff81c0f00d handle_irq_event+0x40 ([kernel.kallsyms])

java 4242/4243 [001] 1002.500000: cpu-clock:
	    7f0000001000 Interpreter (/usr/lib/jvm/libjvm.so)

java 4242/4243 [000] 1002.500000: cpu-clock:
	    7f0000001000 Interpreter (/usr/lib/jvm/libjvm.so)

java 4242/4245 [001] 1002.500000: cpu-clock:
	    7f0000003000 GC_thread (/usr/lib/jvm/libjvm.so)

java 4242/4243 [001] 1003.050000: cpu-clock:
	    7f0000004000 cpu_idle_poll_java (/usr/lib/jvm/libjvm.so)

swapper     0 [001] 1003.100000: cpu-clock:
	ffffffff81000aaa pv_native_safe_halt+0xf ([kernel.kallsyms])
	ffffffff81000bbb default_idle+0x9 ([kernel.kallsyms])
`

func TestFlameScopeHeatmapOnHandMadeScript(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := db.Import("hand", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(handMadeScript), fn)
	})
	if err != nil || st.Samples != 10 {
		t.Fatalf("import: %d samples, %v", st.Samples, err)
	}
	// The whole source, as FlameScope shows a file: first to last sample.
	src := db.Sources()[0]
	h, _, err := HeatmapOf(context.Background(), db, store.Range{From: src.First, To: src.Last + 1}, &store.Filter{}, 50)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]int]int{{0, 49}: 1, {0, 0}: 1, {1, 49}: 1, {1, 24}: 1, {2, 24}: 3, {3, 47}: 1}
	if h.Start != 1000 || len(h.Columns) != 4 || len(h.Rows) != 50 || h.Rows[0] != 980 || h.Rows[49] != 0 || h.MaxValue != 3 {
		t.Fatalf("shape: start %v, %d columns, rows %v..%v, max %d", h.Start, len(h.Columns), h.Rows[0], h.Rows[49], h.MaxValue)
	}
	for c := range 4 {
		for r := range 50 {
			if got := h.Values[c][r]; got != want[[2]int{c, r}] {
				t.Errorf("cell (%d, %d) = %d, want %d", c, r, got, want[[2]int{c, r}])
			}
		}
	}
	// With idle included, the two idle samples appear too.
	hi, _, _ := HeatmapOf(context.Background(), db, store.Range{From: src.First, To: src.Last + 1}, &store.Filter{IncludeIdle: true}, 50)
	if hi.Values[0][49] != 2 || hi.Values[3][44] != 1 {
		t.Errorf("with idle: (0,49)=%d (0.000 and 0.005), (3,44)=%d (3.100)", hi.Values[0][49], hi.Values[3][44])
	}
}

// TestFlameScopeExample imports (an excerpt of) FlameScope's own example,
// examples/perf.test01 (see testdata/flamescope/README.md), and checks the
// heatmap of the whole file against what FlameScope's /heatmap/ returns.
// FlameScope (app/perf/heatmap.py, app/controllers/heatmap.py) takes start
// = the first sample (idle or not), end = the last, keeps the non-idle
// samples ("swapper" and an idle frame such as native_safe_halt are idle),
// and counts each at column floor(t - floor(start)), row rows -
// floor(rows * (t % 1)) - 1, in Python floats:
//
//	start 5076.100000, end 5117.999999: columns = 5118 - 5076 = 42
//	sample       t % 1 (float64)       50 rows      10 rows     100 rows
//	5076.100000  0.1000000000003638    (0, 44)      (0, 8)      (0, 89)
//	5086.200000  0.1999999999998181    (10, 40)     (10, 8)     (10, 80)   50*t%1 = 9.99..., not 10
//	5096.300000  0.3000000000001819    (20, 34)     (20, 6)     (20, 69)
//	5106.400000  0.3999999999996362    (30, 30)     (30, 6)     (30, 60)
//	5116.500000  0.5                   (40, 24)     (40, 4)     (40, 49)
//
// The 4 idle samples (5076.836353, 5077.040428, 5097.999999, 5117.999999)
// count nowhere, but the last one ends the file.
func TestFlameScopeExample(t *testing.T) {
	f, err := os.Open("testdata/flamescope/perf.test01.excerpt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	db, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := db.Import("perf.test01", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(f, fn)
	})
	if err != nil || st.Samples != 9 {
		t.Fatalf("import: %d samples, %v", st.Samples, err)
	}
	src := db.Sources()[0]
	whole := store.Range{From: src.First, To: src.Last + 1}
	for _, tc := range []struct {
		rows  int
		cells [][2]int
	}{
		{50, [][2]int{{0, 44}, {10, 40}, {20, 34}, {30, 30}, {40, 24}}},
		{10, [][2]int{{0, 8}, {10, 8}, {20, 6}, {30, 6}, {40, 4}}},
		{100, [][2]int{{0, 89}, {10, 80}, {20, 69}, {30, 60}, {40, 49}}},
	} {
		h, _, err := HeatmapOf(context.Background(), db, whole, &store.Filter{}, tc.rows)
		if err != nil {
			t.Fatal(err)
		}
		// FlameScope's rows: 1000*i/rows for i = rows-1 down to 0.
		rowsOK := len(h.Rows) == tc.rows
		for i := 0; rowsOK && i < tc.rows; i++ {
			rowsOK = h.Rows[tc.rows-1-i] == 1000*float64(i)/float64(tc.rows)
		}
		if h.Start != 5076 || len(h.Columns) != 42 || h.Columns[41] != 41 || !rowsOK || h.MaxValue != 1 {
			t.Fatalf("%d rows: start %v, %d columns, rows %v, max %d", tc.rows, h.Start, len(h.Columns), h.Rows, h.MaxValue)
		}
		want := map[[2]int]int{}
		for _, c := range tc.cells {
			want[c] = 1
		}
		for c := range h.Values {
			for r, v := range h.Values[c] {
				if v != want[[2]int{c, r}] {
					t.Errorf("%d rows: cell (%d, %d) = %d, want %d", tc.rows, c, r, v, want[[2]int{c, r}])
				}
			}
		}
	}
}
