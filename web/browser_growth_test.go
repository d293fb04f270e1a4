package web

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/apitest"
)

// pctText is util.js's pct, worked out independently: a share with two
// decimals.
func pctText(n, total float64) string {
	if total <= 0 {
		return "0%"
	}
	return fmt.Sprintf("%.2f%%", 100*n/total)
}

// samplesText is views/node.js's count of samples in words.
func samplesText(n int64) string {
	if n == 1 {
		return "1 sample"
	}
	return fmt.Sprintf("%d samples", n)
}

// changeText is legend.js's formatChange, worked out independently: a
// signed CPU time.
func changeText(sec float64) string {
	switch {
	case sec > 0:
		return "+" + formatCPU(sec)
	case sec < 0:
		return "−" + formatCPU(-sec)
	}
	return "0 s"
}

// TestBrowserCompareInCPUTime compares, in the node view, 10 s after the
// sampling rate halved (A: burn, and spike's 2 s) with 10 s before it
// (B: burn alone), and checks that the differential flame graph and the
// growth table speak CPU time, as /api/diff and /api/top say it, with
// their units and shares: burn, half as many samples in A as in B, is no
// change; spike grew by its 2 s.
func TestBrowserCompareInCPUTime(t *testing.T) {
	db, _ := rateChangeStore(t, true)
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	a0, a1, b0, b1 := base+40, base+50, base+10, base+20
	b.openFresh(fmt.Sprintf("%s/#source=host&from=%d&to=%d&sf=%d&st=%d&cmp=1&bf=%d&bt=%d&norm=length", fx.url, base, base+60, a0, a1, b0, b1))

	// The differential flame graph: widths in CPU time, the root's equal
	// to /api/diff's totals.
	var d diffJSON
	apitest.GetJSON(t, fmt.Sprintf("%s/api/diff?source=host&normalize=length&from=%d&to=%d&from2=%d&to2=%d", fx.url, a0, a1, b0, b1), &d)
	type root struct{ A, B, TotalA, TotalB, SamplesA, SamplesB float64 }
	got := eval[*root](t, b.ctx, `window.heatscope.diffRoot()`)
	if got == nil || d.Unit != "cpu-seconds" || got.A != math.Round(d.TotalA*1e9) || got.B != math.Round(d.TotalB*1e9) ||
		got.TotalA != got.A || got.TotalB != got.B || got.SamplesA != float64(d.SamplesA) || got.SamplesB != float64(d.SamplesB) {
		t.Fatalf("the page's diff root %+v, /api/diff %+v", got, d)
	}
	// burn's width: its CPU time, the same in A as in B (10 s), though A
	// holds half as many samples.
	burn := eval[[]float64](t, b.ctx, `(() => { const t = window.heatscope.flameTree();
		for (let i = 0; i < t.n; i++) if (t.names[t.name[i]] === 'burn') return [t.a[i], t.b[i], t.deltaTotal[i]]; return []; })()`)
	if len(burn) != 3 || math.Abs(burn[0]-10e9) > 1e7 || math.Abs(burn[1]-10e9) > 1e7 || math.Abs(burn[2]) > 1e7 {
		t.Fatalf("burn in the differential flame graph: A, B, change %v ns; want 10 s, 10 s, none", burn)
	}
	labels := eval[[]string](t, b.ctx, `[document.getElementById('flame-label').textContent, document.getElementById('diff-legend').textContent]`)
	if !strings.HasSuffix(labels[0], "width: A's CPU time") || !strings.Contains(labels[1], "frame width is A's CPU time") {
		t.Errorf("flame graph label %q, legend %q: want CPU time", labels[0], labels[1])
	}

	// The growth table: what /api/top says, in CPU time with shares.
	var g growthAnswer
	apitest.GetJSON(t, fmt.Sprintf("%s/api/top?source=host&limit=1000&order=total&from=%d&to=%d&from2=%d&to2=%d", fx.url, a0, a1, b0, b1), &g)
	var want [][]string
	for _, f := range g.Functions {
		if f.DeltaTotalCPU <= 0 || f.Via != "" {
			continue // the page shows what grew, pass-throughs hidden
		}
		want = append(want, []string{f.Name, kindShown(f.Kind), formatCPU(f.TotalCPU), pctText(f.TotalCPU, g.CPU), formatCPU(f.TotalCPU2),
			pctText(f.TotalCPU2, g.CPU2), changeText(f.DeltaTotalCPU), changeText(f.DeltaSelfCPU)})
	}
	rows := eval[[][]string](t, b.ctx, `[...document.querySelectorAll('#growth tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`)
	if len(want) == 0 || want[0][0] != "spike_fn" || fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("growth table rows\n%q\nwant (from /api/top)\n%q", rows, want)
	}
	// spike_fn grew by its 2 s (and a sample); burn_fn, steady, by at
	// most a sample (by counts it fell by half).
	for _, f := range g.Functions {
		if f.Name == "spike_fn" && math.Abs(f.DeltaTotalCPU-2) > 0.025 || f.Name == "burn_fn" && math.Abs(f.DeltaTotalCPU) > 0.025 {
			t.Errorf("%s grew by %v s (%d samples in A, %d in B)", f.Name, f.DeltaTotalCPU, f.Total, f.Total2)
		}
	}
	texts := eval[[]string](t, b.ctx, `[document.getElementById('growth-label').textContent,
		[...document.querySelectorAll('#growth thead th')].map((th) => th.textContent).join(' | ')]`)
	wantLabel := fmt.Sprintf("A: %s of CPU time (%s), B: %s (%s), B scaled to A's length", formatCPU(g.CPU), samplesText(g.Samples), formatCPU(g.CPU2), samplesText(g.Samples2))
	wantHead := "function | kind | A total CPU time | % of A | B total CPU time | % of B | Δ total CPU time | Δ self CPU time"
	if texts[0] != wantLabel || texts[1] != wantHead {
		t.Errorf("growth label %q, header %q; want %q, %q", texts[0], texts[1], wantLabel, wantHead)
	}
	b.screenshot("compare-cpu-time.png")

	// A window without spike against the one with it: A is empty, and the
	// note gives the API's message and what B holds, in CPU time.
	b.openFresh(fmt.Sprintf("%s/#source=host&from=%d&to=%d&comm=spike&sf=%d&st=%d&cmp=1&bf=%d&bt=%d", fx.url, base, base+60, b0, b1, a0, a1))
	var spike diffJSON
	apitest.GetJSON(t, fmt.Sprintf("%s/api/diff?source=host&comm=spike&from=%d&to=%d&from2=%d&to2=%d", fx.url, b0, b1, a0, a1), &spike)
	note := b.notes("flame-empty")["flame-empty"]
	if wantNote := fmt.Sprintf(" The baseline B holds %s of CPU time (%s).", formatCPU(spike.TotalB), samplesText(spike.SamplesB)); spike.SamplesB == 0 ||
		!strings.HasPrefix(note, spike.Message) || spike.Message == "" || !strings.HasSuffix(note, wantNote) {
		t.Errorf("flame-empty %q, want … %q", note, wantNote)
	}
}
