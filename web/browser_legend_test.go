package web

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/apitest"
)

// formatCPU is legend.js's formatting of a CPU time, worked out
// independently: three significant digits in s, ms or µs.
func formatCPU(sec float64) string {
	if !(sec > 0) {
		return "0 s"
	}
	round := func(v float64) float64 { // to three significant digits
		r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
		return r
	}
	for _, u := range []struct {
		name  string
		scale float64
	}{{"s", 1}, {"ms", 1e3}} {
		if v := round(sec * u.scale); v >= 1 {
			return strconv.FormatFloat(v, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatFloat(round(sec*1e6), 'f', -1, 64) + " µs"
}

// kindShown is the name the UI gives an API frame kind (flame.js's
// kindName, the legend's names), worked out independently.
func kindShown(kind string) string {
	switch kind {
	case "user":
		return "native"
	case "jit":
		return "JIT"
	case "python":
		return "Python"
	}
	return kind
}

// TestBrowserLegends checks the colour legends of the heatmap and the
// per-CPU view: they name CPU time (the unit /api/heatmap and /api/percpu
// report, not samples), label the darkest colour with the answer's
// largest value, and draw the cells' colour scale from white to it.
func TestBrowserLegends(t *testing.T) {
	fx := newFixture(t, uiStore(t), Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/")
	var hm struct {
		Unit   string  `json:"unit"`
		MaxCPU float64 `json:"maxcpu"`
		Rows   []float64
	}
	apitest.GetJSON(t, fmt.Sprintf("%s/api/heatmap?source=fixture&from=%s&to=%s&rows=50", fx.url, b.hashParam("from"), b.hashParam("to")), &hm)
	if hm.Unit != "cpu-seconds" || hm.MaxCPU <= 0 {
		t.Fatalf("/api/heatmap: unit %q, maxcpu %v", hm.Unit, hm.MaxCPU)
	}
	type legend struct {
		Text   string
		Hidden bool
		Max    float64
		Left   [3]int
		Right  [3]int
	}
	read := func(id string) legend {
		return eval[legend](t, b.ctx, fmt.Sprintf(`(() => { const box = document.getElementById(%q), c = box.querySelector('canvas');
			const dpr = window.devicePixelRatio || 1, ctx = c.getContext('2d'), y = Math.floor(c.height / 2);
			const px = (x) => [...ctx.getImageData(x, y, 1, 1).data.slice(0, 3)];
			return {Text: box.textContent, Hidden: box.hidden, Max: +box.dataset.max, Left: px(Math.ceil(2 * dpr)), Right: px(c.width - Math.ceil(2 * dpr))}; })()`, id))
	}
	lg := read("heatmap-legend")
	// 20 ms cells; the busiest holds maxcpu of CPU time, maxcpu/0.02 CPUs.
	want := fmt.Sprintf("colour: CPU time in each cell (a 20 ms slice of a second, all CPUs together) 0%s (%.2f CPUs busy)",
		formatCPU(hm.MaxCPU), hm.MaxCPU/0.02)
	if lg.Hidden || lg.Text != want || lg.Max != hm.MaxCPU {
		t.Errorf("heatmap legend %+v, want %q", lg, want)
	}
	// The scale: near white at 0, the darkest colour at max (a pixel or
	// two in from each end).
	if lg.Left[0] < 250 || lg.Left[1] < 245 || near(lg.Right, heatColour(1, 1, false), 6) != nil {
		t.Errorf("heatmap legend colours: left %v, right %v, want white to %v", lg.Left, lg.Right, heatColour(1, 1, false))
	}
	if strings.Contains(lg.Text, "sample") {
		t.Errorf("the heatmap legend counts samples: %q", lg.Text)
	}

	var pc struct {
		Unit string      `json:"unit"`
		Step float64     `json:"step"`
		CPU  [][]float64 `json:"cpu"`
	}
	apitest.GetJSON(t, fmt.Sprintf("%s/api/percpu?source=fixture&from=%s&to=%s", fx.url, b.hashParam("from"), b.hashParam("to")), &pc)
	var max float64
	for _, row := range pc.CPU {
		for _, v := range row {
			max = math.Max(max, v)
		}
	}
	lg = read("percpu-legend")
	want = fmt.Sprintf("colour: CPU time of each CPU in each %g s step 0%s (%g%% of the CPU)", pc.Step, formatCPU(max), math.Round(1000*max/pc.Step)/10)
	if pc.Unit != "cpu-seconds" || lg.Hidden || lg.Text != want || lg.Max != max {
		t.Errorf("per-CPU legend %+v, want %q (unit %q)", lg, want, pc.Unit)
	}
	b.screenshot("legends.png")

	// No samples, no scale to show.
	b.openFresh(fx.url + "/#source=fixture&comm=nosuchcommand")
	if !read("heatmap-legend").Hidden || !read("percpu-legend").Hidden {
		t.Error("legends shown without samples")
	}
}

// near returns an error unless colour c is within tol of want.
func near(c, want [3]int, tol int) error {
	for i := range c {
		if c[i] < want[i]-tol || c[i] > want[i]+tol {
			return fmt.Errorf("%v not near %v", c, want)
		}
	}
	return nil
}
