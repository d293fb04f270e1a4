package web

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// longStart is the first second of the "long" source: 600 s ending well
// before the fixture's capture, so that the UI opens on the capture.
const longStart = base - 1000

// longBurst is the second of the long source holding a burst of 30 samples
// 0.2 ms apart from 500 ms on, on 30 CPUs: within one cell of 10, 20 or
// 50 ms.
const longBurst = longStart + 500

// longPerfScript is 600 s of "longapp" sampled every 100 ms (one sample a
// 20 ms heatmap cell at offsets 50, 150, ... 950 ms), plus the burst.
func longPerfScript() string {
	var b strings.Builder
	sample := func(t float64, cpu int) {
		fmt.Fprintf(&b, "longapp 300/300 [%03d] %.6f: 10101010 cpu-clock:\n\t    400200 long_fn (/usr/bin/longapp)\n\t    400000 main (/usr/bin/longapp)\n\n", cpu, t)
	}
	for k := range 6000 {
		t := float64(longStart) + 0.05 + float64(k)*0.1
		if k == 5005 { // longBurst + 0.5 s
			for j := range 30 {
				sample(float64(longBurst)+0.5+float64(j)*0.0002, 1+j)
			}
		}
		sample(t, 0)
	}
	return b.String()
}

// viewsStore is the browser tests' store with the long source added.
func viewsStore(t *testing.T) *store.DB {
	t.Helper()
	db := uiStore(t)
	if _, err := db.Import("long", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(longPerfScript()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

// browser drives one headless chromium page.
type browser struct {
	t        *testing.T
	ctx      context.Context
	jsErrors chan string
	shotDir  string
}

// newBrowser starts chromium for the duration of the test.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	ctx := browsertest.Start(t, 1300, 1400, 120*time.Second)
	b := &browser{t: t, ctx: ctx, jsErrors: make(chan string, 100), shotDir: t.TempDir()}
	if dir := os.Getenv("HEATSCOPE_SCREENSHOT_DIR"); dir != "" {
		b.shotDir = dir
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error:"
			for _, arg := range ev.Args {
				msg += " " + string(arg.Value) + arg.Description
			}
		default:
			return
		}
		select {
		case b.jsErrors <- msg:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case msg := <-b.jsErrors:
			t.Errorf("JavaScript error: %s", msg)
		default:
		}
	})
	return b
}

// settled waits until the page has loaded and no request is under way.
var settled = browsertest.Until(`document.body.dataset.ready === '1' && document.body.dataset.busy === '0'`, 30*time.Second)

func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(b.shotDir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// hashParam reads a parameter of the page's URL hash.
func (b *browser) hashParam(name string) string {
	b.t.Helper()
	h := eval[string](b.t, b.ctx, `location.hash.slice(1)`)
	v, err := url.ParseQuery(h)
	if err != nil {
		b.t.Fatalf("hash %q: %v", h, err)
	}
	return v.Get(name)
}

// pixel reads the colour of a canvas at CSS pixel (x, y).
func (b *browser) pixel(canvas string, x, y float64) [3]int {
	b.t.Helper()
	p := eval[[]int](b.t, b.ctx, fmt.Sprintf(`(() => { const dpr = window.devicePixelRatio || 1;
		const d = document.getElementById(%q).getContext('2d').getImageData(Math.floor(%g * dpr), Math.floor(%g * dpr), 1, 1).data;
		return [d[0], d[1], d[2]]; })()`, canvas, x, y))
	return [3]int{p[0], p[1], p[2]}
}

// heatColour is util.js's colour scale, worked out independently.
func heatColour(v, max float64, enhanced bool) [3]int {
	if v <= 0 {
		return [3]int{255, 255, 255}
	}
	t := v / max
	if enhanced {
		t = math.Max(0.3, math.Sqrt(t))
	}
	g := int(math.Round(255 - t*(255-24)))
	return [3]int{int(math.Round(255 - t*(255-178))), g, g}
}

type heatmapData struct {
	Start    float64   `json:"start"`
	Columns  []int     `json:"columns"`
	Rows     []float64 `json:"rows"`
	Values   [][]int   `json:"values"`
	MaxValue int       `json:"maxvalue"`
	// CPU and MaxCPU are what the cells' colours show.
	CPU    [][]float64 `json:"cpu"`
	MaxCPU float64     `json:"maxcpu"`
}

// heatmapLayout is where the heatmap canvas draws its cells.
type heatmapLayout struct {
	X, Y, CellW, CellH, Left, Top float64
	Cols, Rows                    int
}

func (b *browser) heatmapLayout() heatmapLayout {
	b.t.Helper()
	return eval[heatmapLayout](b.t, b.ctx, `(() => { const c = document.getElementById('heatmap'), r = c.getBoundingClientRect(), d = c.dataset;
		return {X: r.left, Y: r.top, CellW: +d.cellW, CellH: +d.cellH, Left: +d.left, Top: +d.top, Cols: +d.cols, Rows: +d.rows}; })()`)
}

// cellCentre is the centre of heatmap cell (c, r), in canvas (local) and
// page (viewport) coordinates.
func (l heatmapLayout) cellCentre(c, r int) (lx, ly, px, py float64) {
	lx = l.Left + (float64(c)+0.5)*l.CellW
	ly = l.Top + (float64(r)+0.5)*l.CellH
	return lx, ly, l.X + lx, l.Y + ly
}

// checkHeatmap checks that the drawn heatmap is /api/heatmap's answer for
// the page's span and rows, and returns it.
func (b *browser) checkHeatmap(fx *fixture, source string, rows int) heatmapData {
	b.t.Helper()
	got := eval[heatmapData](b.t, b.ctx, `window.heatscope.heatmap()`)
	var want heatmapData
	apitest.GetJSON(b.t, fmt.Sprintf("%s/api/heatmap?source=%s&from=%s&to=%s&rows=%d", fx.url, source, b.hashParam("from"), b.hashParam("to"), rows), &want)
	lay := b.heatmapLayout()
	if !reflect.DeepEqual(got, want) || len(got.Rows) != rows || lay.Rows != rows || lay.Cols != len(want.Columns) || b.hashParam("rows") != fmt.Sprint(rows) {
		b.t.Fatalf("heatmap drawn %d×%d (layout %+v, URL rows %q), want /api/heatmap's %d×%d with %d rows",
			len(got.Columns), len(got.Rows), lay, b.hashParam("rows"), len(want.Columns), len(want.Rows), rows)
	}
	return got
}

// TestBrowserTimeline zooms the overview timeline with the wheel and the
// buttons, pans it with a shift-drag, drags over it to choose the heatmap's
// span, and checks each view against the API.
func TestBrowserTimeline(t *testing.T) {
	fx := newFixture(t, viewsStore(t), Options{})
	b := newBrowser(t)
	b.run("open the long source", chromedp.Navigate(fx.url+"/#source=long"), settled)

	type timelineData struct {
		Start  float64 `json:"start"`
		Step   float64 `json:"step"`
		Counts []int64 `json:"counts"`
	}
	type timelineState struct {
		Data                       timelineData
		View                       []float64
		Width, X, Y                float64
		ViewFrom, ViewTo, From, To *float64
	}
	read := func() timelineState {
		return eval[timelineState](t, b.ctx, `(() => { const tl = window.heatscope.timeline(), s = window.heatscope.state,
			r = document.getElementById('timeline').getBoundingClientRect();
			return {Data: tl.data, View: tl.view, Width: r.width, X: r.left, Y: r.top,
				ViewFrom: s.viewFrom, ViewTo: s.viewTo, From: s.from, To: s.to}; })()`)
	}
	// checkData checks the timeline shows /api/timeline's answer for the
	// view in the URL (everything without one).
	checkData := func(what string, st timelineState) {
		t.Helper()
		q := "source=long"
		if vf := b.hashParam("vf"); vf != "" {
			q += "&from=" + vf + "&to=" + b.hashParam("vt")
		}
		var want timelineData
		apitest.GetJSON(t, fx.url+"/api/timeline?"+q, &want)
		if !reflect.DeepEqual(st.Data, want) {
			t.Fatalf("%s: timeline shows start %v step %v (%d points), /api/timeline?%s start %v step %v (%d points)",
				what, st.Data.Start, st.Data.Step, len(st.Data.Counts), q, want.Start, want.Step, len(want.Counts))
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-3 }
	const lo, hi = float64(longStart), float64(longStart + 600) // the source: first second, last + 1
	// clamp is the app's rule for views: at least 10 s wide, within the
	// source; nil (everything) when as wide as the source.
	clamp := func(v []float64) []float64 {
		if v[1]-v[0] >= hi-lo {
			return nil
		}
		w := math.Max(10, v[1]-v[0])
		from := math.Min(math.Max(v[0], lo), hi-w)
		return []float64{from, from + w}
	}
	shown := func(st timelineState) any {
		if st.ViewFrom == nil || st.ViewTo == nil {
			return "everything"
		}
		return []float64{*st.ViewFrom, *st.ViewTo}
	}
	viewIs := func(st timelineState, want []float64) bool {
		if want == nil {
			return st.ViewFrom == nil && st.ViewTo == nil
		}
		return st.ViewFrom != nil && near(*st.ViewFrom, want[0]) && near(*st.ViewTo, want[1])
	}

	whole := read()
	checkData("whole", whole)
	if whole.ViewFrom != nil || whole.View[0] < lo || whole.View[0] > lo+1 || whole.View[1] < hi-1 || whole.View[1]-whole.View[0] > 610 {
		t.Fatalf("whole timeline: view %v, state view %v", whole.View, whole.ViewFrom)
	}

	// The wheel zooms in around the pointer: the time under it stays put.
	px := 0.25 * whole.Width
	at := whole.View[0] + px/whole.Width*(whole.View[1]-whole.View[0])
	wantView := clamp([]float64{at - (at-whole.View[0])/1.5, at + (whole.View[1]-at)/1.5})
	b.run("wheel", chromedp.MouseEvent(chromedp.MouseWheel, whole.X+px, whole.Y+30, func(p *input.DispatchMouseEventParams) {
		// the protocol wants both deltas, and leaves out a zero one
		p.DeltaX, p.DeltaY = 0.01, -100
	}), settled)
	zoomed := read()
	checkData("zoomed", zoomed)
	if wantView == nil || !viewIs(zoomed, wantView) || zoomed.Data.Step >= whole.Data.Step || b.hashParam("vf") == "" {
		t.Fatalf("wheel zoom at %v: view %v, want %v; step %v (whole %v)", at, shown(zoomed), wantView, zoomed.Data.Step, whole.Data.Step)
	}

	// A shift-drag 200 px to the left pans the view later by 200 px of time.
	v := []float64{*zoomed.ViewFrom, *zoomed.ViewTo}
	dt := 200 / zoomed.Width * (v[1] - v[0])
	y := zoomed.Y + 30
	shift := chromedp.ButtonModifiers(chromedp.ModifierShift)
	b.run("shift-drag", chromedp.MouseEvent(chromedp.MousePressed, zoomed.X+700, y, chromedp.ButtonLeft, shift),
		chromedp.MouseEvent(chromedp.MouseMoved, zoomed.X+600, y, chromedp.ButtonLeft, shift),
		chromedp.MouseEvent(chromedp.MouseMoved, zoomed.X+500, y, chromedp.ButtonLeft, shift),
		chromedp.MouseEvent(chromedp.MouseReleased, zoomed.X+500, y, chromedp.ButtonLeft, shift), settled)
	panned := read()
	checkData("panned", panned)
	if want := clamp([]float64{v[0] + dt, v[1] + dt}); want == nil || want[0] != v[0]+dt || !viewIs(panned, want) {
		t.Fatalf("pan by %v s: view %v, was %v", dt, shown(panned), v)
	}

	// A drag from 300 to 500 px chooses whole seconds, which the heatmap,
	// the per-CPU view and the flame graph then show.
	v = []float64{*panned.ViewFrom, *panned.ViewTo}
	timeAt := func(x float64) float64 { return v[0] + x/panned.Width*(v[1]-v[0]) }
	wantFrom, wantTo := math.Floor(timeAt(300)), math.Ceil(timeAt(500))
	b.run("drag a span", chromedp.MouseEvent(chromedp.MousePressed, panned.X+300, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, panned.X+400, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, panned.X+500, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, panned.X+500, y, chromedp.ButtonLeft), settled)
	spanned := read()
	if *spanned.From != wantFrom || *spanned.To != wantTo || *spanned.ViewFrom != v[0] {
		t.Fatalf("drag: span %v-%v, want %v-%v (view %v)", *spanned.From, *spanned.To, wantFrom, wantTo, shown(spanned))
	}
	h := b.checkHeatmap(fx, "long", 50)
	if h.Start != wantFrom || len(h.Columns) != int(wantTo-wantFrom) {
		t.Fatalf("heatmap of span %v-%v: start %v, %d columns", wantFrom, wantTo, h.Start, len(h.Columns))
	}
	pcStart := eval[float64](t, b.ctx, `window.heatscope.percpu().start`)
	flameLabel := eval[string](t, b.ctx, `document.getElementById('flame-label').textContent`)
	if pcStart != wantFrom || !strings.Contains(flameLabel, "whole span") {
		t.Fatalf("per-CPU view from %v, flame graph %q", pcStart, flameLabel)
	}
	b.screenshot("ui-timeline-zoomed.png")

	// The buttons halve and double the view around its middle; show all
	// returns to everything.
	mid := (v[0] + v[1]) / 2
	for _, step := range []struct {
		button string
		want   []float64
	}{
		{"#timeline-in", clamp([]float64{mid - (v[1]-v[0])/4, mid + (v[1]-v[0])/4})},
		{"#timeline-out", clamp([]float64{mid - (v[1]-v[0])/2, mid + (v[1]-v[0])/2})},
		{"#timeline-out", nil}, // 800 s: more than the source
	} {
		b.run(step.button, chromedp.Click(chromedp.CSS(step.button)), settled)
		st := read()
		checkData(step.button, st)
		if !viewIs(st, step.want) {
			t.Fatalf("%s: view %v, want %v", step.button, shown(st), step.want)
		}
	}
	b.run("zoom in", chromedp.Click(chromedp.CSS("#timeline-in")), settled)
	if st := read(); st.ViewFrom == nil {
		t.Fatal("zoom in from everything kept everything")
	}
	b.run("show all", chromedp.Click(chromedp.CSS("#timeline-all")), settled)
	all := read()
	checkData("show all", all)
	if all.ViewFrom != nil || b.hashParam("vf") != "" || !reflect.DeepEqual(all.Data, whole.Data) {
		t.Fatalf("show all: view %v, hash vf %q", shown(all), b.hashParam("vf"))
	}
}

// TestBrowserHeatmapControls checks the rows selector, enhanced mode and
// Escape, reading the heatmap's pixels, and that a reload of the URL
// reproduces the view.
func TestBrowserHeatmapControls(t *testing.T) {
	fx := newFixture(t, viewsStore(t), Options{})
	b := newBrowser(t)
	from, to := longBurst-5, longBurst+5
	b.run("open 10 s of the long source", chromedp.Navigate(fmt.Sprintf("%s/#source=long&from=%d&to=%d", fx.url, from, to)), settled)
	b.run("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap")))
	h := b.checkHeatmap(fx, "long", 50)
	// Column 5 is the burst's second: 30 samples in its 500-520 ms cell
	// (row 24), one in the cells at 50, 150, ... ms (row 47 is 50 ms).
	if h.MaxValue != 30 || h.Values[5][24] != 30 || h.Values[4][47] != 1 {
		t.Fatalf("heatmap: max %d, burst cell %d, single cell %d", h.MaxValue, h.Values[5][24], h.Values[4][47])
	}
	lay := b.heatmapLayout()
	single := func() [3]int {
		lx, ly, _, _ := lay.cellCentre(4, 47)
		return b.pixel("heatmap", lx, ly)
	}
	burst := func() [3]int {
		lx, ly, _, _ := lay.cellCentre(5, 24)
		return b.pixel("heatmap", lx, ly)
	}
	// The colours are CPU time: each sample's period spread over the time
	// before it.
	singleCPU, burstCPU := h.CPU[4][47], h.CPU[5][24]
	if singleCPU <= 0 || burstCPU < 5*singleCPU {
		t.Fatalf("heatmap CPU: single cell %v s, burst cell %v s", singleCPU, burstCPU)
	}
	if got, want := single(), heatColour(singleCPU, h.MaxCPU, false); got != want || burst() != heatColour(burstCPU, h.MaxCPU, false) {
		t.Fatalf("linear colours: single sample %v, want %v; burst %v, want %v", got, want, burst(), heatColour(burstCPU, h.MaxCPU, false))
	}

	// Enhanced mode makes the single samples stand out; the busiest cell
	// keeps its colour.
	b.run("enhanced", chromedp.Click(chromedp.CSS("#enhanced")))
	if got, want := single(), heatColour(singleCPU, h.MaxCPU, true); got != want || burst() != heatColour(burstCPU, h.MaxCPU, true) || b.hashParam("enhanced") != "1" {
		t.Fatalf("enhanced colours: single sample %v, want %v; burst %v; URL enhanced=%q", got, want, burst(), b.hashParam("enhanced"))
	}
	b.screenshot("ui-enhanced.png")

	// The rows selector: 20 and 100 rows.
	for _, rows := range []int{20, 100} {
		b.run(fmt.Sprintf("%d rows", rows), chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
			`(() => { const s = document.getElementById('rows'); s.value = '%d'; s.dispatchEvent(new Event('change')); })()`, rows)), settled)
		h := b.checkHeatmap(fx, "long", rows)
		// The burst's 7.25 ms (30 × 0.5 ms minus one step) fits one cell of
		// 1000/rows ms at 500 ms.
		r := rows - int(math.Floor(float64(rows)*0.5)) - 1
		if h.Values[5][r] != 30 || len(h.Values[5]) != rows {
			t.Fatalf("%d rows: the burst's cell (5, %d) holds %d", rows, r, h.Values[5][r])
		}
	}

	// Select seconds 4 to 5 (bottom of column 4 to top of column 5), then
	// Escape clears it: the flame graph is the whole span's again and the
	// cells lose the selection's tint.
	lay = b.heatmapLayout()
	_, _, x0, y0 := lay.cellCentre(4, lay.Rows-1)
	_, _, x1, y1 := lay.cellCentre(5, 0)
	b.run("select two seconds", chromedp.MouseClickXY(x0, y0), chromedp.MouseClickXY(x1, y1), settled)
	sel := eval[[]float64](t, b.ctx, `[window.heatscope.state.selFrom, window.heatscope.state.selTo]`)
	lx, ly, _, _ := lay.cellCentre(4, lay.Rows-1)
	h = eval[heatmapData](t, b.ctx, `window.heatscope.heatmap()`)
	plain := heatColour(h.CPU[4][lay.Rows-1], h.MaxCPU, true)
	if len(sel) != 2 || sel[0] != float64(from+4) || sel[1] != float64(from+6) || b.pixel("heatmap", lx, ly) == plain {
		t.Fatalf("selection %v, want [%d %d]; cell colour %v (untinted %v)", sel, from+4, from+6, b.pixel("heatmap", lx, ly), plain)
	}
	b.run("Escape", chromedp.KeyEvent("\x1b"), settled)
	label := eval[string](t, b.ctx, `document.getElementById('flame-label').textContent`)
	cleared := eval[bool](t, b.ctx, `window.heatscope.state.selFrom === null && window.heatscope.state.selTo === null`)
	if !cleared || b.hashParam("sf") != "" || !strings.Contains(label, "whole span") || b.pixel("heatmap", lx, ly) != plain {
		t.Fatalf("after Escape: cleared %v, URL sf %q, flame graph %q, cell colour %v want %v", cleared, b.hashParam("sf"), label, b.pixel("heatmap", lx, ly), plain)
	}

	// A reload of the URL shows the same view: span, 100 rows, enhanced.
	b.run("reload", chromedp.Reload(), settled)
	b.run("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap")))
	h = b.checkHeatmap(fx, "long", 100)
	lay = b.heatmapLayout()
	lx, ly, _, _ = lay.cellCentre(5, 49)
	enhanced := eval[bool](t, b.ctx, `document.getElementById('enhanced').checked`)
	rowsShown := eval[string](t, b.ctx, `document.getElementById('rows').value`)
	if !enhanced || rowsShown != "100" || b.pixel("heatmap", lx, ly) != heatColour(h.CPU[5][49], h.MaxCPU, true) || h.CPU[5][49] <= 0 {
		t.Fatalf("after reload: enhanced %v, rows %q, burst cell %v", enhanced, rowsShown, b.pixel("heatmap", lx, ly))
	}
}

// TestBrowserFlameGraph clicks a frame to zoom, resets, searches (the
// matches highlighted, their share given as /api/top counts it), turns
// the graph into an icicle, hovers for the tooltip, and reloads.
func TestBrowserFlameGraph(t *testing.T) {
	fx := newFixture(t, viewsStore(t), Options{})
	b := newBrowser(t)
	b.run("open the page", chromedp.Navigate(fx.url+"/"), settled)
	b.run("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap")))
	lay := b.heatmapLayout()
	start := eval[float64](t, b.ctx, `window.heatscope.heatmap().start`)
	_, _, x0, y0 := lay.cellCentre(1, lay.Rows-1)
	_, _, x1, y1 := lay.cellCentre(2, 0)
	b.run("select seconds 1 and 2", chromedp.MouseClickXY(x0, y0), chromedp.MouseClickXY(x1, y1), settled)
	selFrom, selTo := ftoa(start+1), ftoa(start+3)
	if b.hashParam("sf") != selFrom || b.hashParam("st") != selTo {
		t.Fatalf("selection %s-%s, want %s-%s", b.hashParam("sf"), b.hashParam("st"), selFrom, selTo)
	}
	var top struct {
		Samples   int64   `json:"samples"`
		CPU       float64 `json:"cpu"`
		Functions []struct {
			Name     string  `json:"name"`
			Total    int64   `json:"total"`
			TotalCPU float64 `json:"totalCpu"`
		} `json:"functions"`
	}
	apitest.GetJSON(t, fx.url+"/api/top?source=fixture&from="+selFrom+"&to="+selTo, &top)
	var hotTotal int64
	var hotCPU float64
	for _, f := range top.Functions {
		if f.Name == "hot_fixture_function" {
			hotTotal, hotCPU = f.Total, f.TotalCPU
		}
	}
	if top.Samples != 400 || hotTotal == 0 || hotTotal == top.Samples || !(hotCPU > 0) || !(top.CPU > hotCPU) {
		t.Fatalf("/api/top: %d samples (%v s), %d in hot_fixture_function (%v s)", top.Samples, top.CPU, hotTotal, hotCPU)
	}

	b.run("scroll to the flame graph", chromedp.ScrollIntoView(chromedp.CSS("#flame")))
	type box struct{ X, Y, W, Value float64 }
	boxes := func(name string) []box {
		return eval[[]box](t, b.ctx, fmt.Sprintf(`window.heatscope.flameBoxes(%q).map((b) => ({X: b.x, Y: b.y, W: b.w, Value: b.value}))`, name))
	}
	canvas := eval[[]float64](t, b.ctx, `(() => { const r = document.getElementById('flame').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	width := canvas[2]
	hot := boxes("hot_fixture_function")
	// Widths are CPU time.
	if len(hot) != 1 || math.Abs(hot[0].Value-hotCPU) > 1e-9 || math.Abs(hot[0].W-hotCPU/top.CPU*width) > 0.01 {
		t.Fatalf("hot_fixture_function boxes %+v (canvas %v wide), want one of %v s", hot, width, hotCPU)
	}
	centre := func(bx box) (float64, float64) { return bx.X + bx.W/2, bx.Y + 8 }

	// Hovering shows the frame's CPU time, its share, and its samples.
	hx, hy := centre(hot[0])
	b.run("hover", chromedp.MouseEvent(chromedp.MouseMoved, canvas[0]+hx, canvas[1]+hy))
	tip := eval[string](t, b.ctx, `document.getElementById('tooltip').hidden ? '' : document.getElementById('tooltip').textContent`)
	if want := fmt.Sprintf("hot_fixture_function\nnative: %s of CPU time (%.2f%%), self ", formatCPU(hotCPU), 100*hotCPU/top.CPU); !strings.HasPrefix(tip, want) ||
		!strings.Contains(tip, fmt.Sprintf("\n%d samples, self ", hotTotal)) {
		t.Fatalf("tooltip %q, want %q... and %d samples", tip, want, hotTotal)
	}

	// Clicking the frame zooms into it: it spans the width, its ancestors
	// stay, the other command's frames go.
	b.run("zoom", chromedp.MouseClickXY(canvas[0]+hx, canvas[1]+hy))
	hot = boxes("hot_fixture_function")
	names := eval[[]string](t, b.ctx, `window.heatscope.flameNames()`)
	if z := eval[string](t, b.ctx, `window.heatscope.flameZoom()`); z != "hot_fixture_function" || len(hot) != 1 || math.Abs(hot[0].W-width) > 0.01 ||
		slices.Contains(names, xssName) || !slices.Contains(names, "hotapp") || !slices.Contains(names, "root") {
		t.Fatalf("zoomed into %q: hot_fixture_function %+v (width %v), frames %q", z, hot, width, names)
	}
	hx, hy = centre(hot[0])
	if got := b.pixel("flame", hx, hy); got == [3]int{255, 255, 255} || got == [3]int{224, 64, 251} {
		t.Fatalf("zoomed frame's colour %v", got)
	}
	b.screenshot("ui-flame-zoomed.png")
	b.run("reset", chromedp.Click(chromedp.CSS("#flame-reset")))
	hot = boxes("hot_fixture_function")
	names = eval[[]string](t, b.ctx, `window.heatscope.flameNames()`)
	if z := eval[*string](t, b.ctx, `window.heatscope.flameZoom()`); z != nil || len(hot) != 1 || math.Abs(hot[0].W-hotCPU/top.CPU*width) > 0.01 || !slices.Contains(names, xssName) {
		t.Fatalf("after reset: zoom %v, hot_fixture_function %+v, frames %q", z, hot, names)
	}

	// Search: the matching frame turns magenta, the others keep their
	// colours, and the matched share is /api/top's total over all samples.
	b.run("search", chromedp.SendKeys(chromedp.CSS("#flame-search"), "hot_fix"))
	match := eval[string](t, b.ctx, `document.getElementById('flame-match').textContent`)
	if want := fmt.Sprintf("matched: %s of %s (%.2f%%)", formatCPU(hotCPU), formatCPU(top.CPU), 100*hotCPU/top.CPU); match != want {
		t.Fatalf("search: %q, want %q", match, want)
	}
	hx, hy = centre(hot[0])
	mainBox := boxes("main")
	mx, my := centre(mainBox[0])
	if got, other := b.pixel("flame", hx, hy), b.pixel("flame", mx, my); got != [3]int{224, 64, 251} || other == got || b.hashParam("search") != "hot_fix" {
		t.Fatalf("search highlight: match %v, other frame %v, URL search %q", got, other, b.hashParam("search"))
	}
	b.screenshot("ui-flame-search.png")

	// Icicle: the root moves from the bottom row to the top one.
	root := boxes("root")
	if len(root) != 1 || root[0].Y != canvas[3]-17 {
		t.Fatalf("flame: root box %+v, canvas %v high", root, canvas[3])
	}
	b.run("icicle", chromedp.Click(chromedp.CSS("#icicle")))
	root = boxes("root")
	if len(root) != 1 || root[0].Y != 0 || b.pixel("flame", width/2, 8) != [3]int{200, 200, 200} || b.hashParam("icicle") != "1" {
		t.Fatalf("icicle: root box %+v, top row colour %v", root, b.pixel("flame", width/2, 8))
	}

	// The URL reproduces it all after a reload.
	b.run("reload", chromedp.Reload(), settled)
	root = boxes("root")
	again := eval[string](t, b.ctx, `document.getElementById('flame-match').textContent`)
	search := eval[string](t, b.ctx, `document.getElementById('flame-search').value`)
	if again != match || search != "hot_fix" || len(root) != 1 || root[0].Y != 0 || b.hashParam("sf") != selFrom {
		t.Fatalf("after reload: %q (was %q), search %q, root %+v, selection from %q", again, match, search, root, b.hashParam("sf"))
	}
}

// TestBrowserFilterBar applies a command and a frame filter from the
// filter bar and checks that every view follows: the timeline, heatmap,
// per-CPU view, flame graph and top functions count only the matching
// samples, in the cells where they ran, and the pprof link carries them.
func TestBrowserFilterBar(t *testing.T) {
	fx := newFixture(t, viewsStore(t), Options{})
	b := newBrowser(t)
	b.run("open the page", chromedp.Navigate(fx.url+"/"), settled)
	// xssapp runs its one function, xssName, only in the first half of
	// each second: 150 of the capture's 600 samples.
	b.run("filter", chromedp.SetValue(chromedp.CSS("#f-comm"), "xssapp"), chromedp.SetValue(chromedp.CSS("#f-frame"), "^<img"),
		chromedp.Click(chromedp.CSS("#f-apply")),
		// the page writes the filters into the URL as it starts the views' requests
		browsertest.Until(`new URLSearchParams(location.hash.slice(1)).get('frame') === '^<img'`, 30*time.Second), settled)
	if b.hashParam("comm") != "xssapp" || b.hashParam("frame") != "^<img" {
		t.Fatalf("URL hash: comm %q, frame %q", b.hashParam("comm"), b.hashParam("frame"))
	}
	type counts struct {
		Timeline, PerCPU, Heatmap, Flame int
		Top                              string
	}
	got := eval[counts](t, b.ctx, `(() => { const sum = (a) => a.flat().reduce((x, y) => x + y, 0), h = window.heatscope;
		const rows = [...document.querySelectorAll('#top tbody tr')];
		return {Timeline: sum(h.timeline().data.counts), PerCPU: sum(h.percpu().counts), Heatmap: sum(h.heatmap().values),
			Flame: h.flameTree().value[0], Top: rows.find((r) => r.cells[0].textContent === 'main').cells[4].textContent}; })()`)
	// The top table shows main's CPU time: 150 samples of the fixture's period.
	var sources []struct {
		Name     string `json:"name"`
		PeriodNs int64  `json:"periodNs"`
	}
	apitest.GetJSON(t, fx.url+"/api/sources", &sources)
	period := store.DefaultPeriodNs
	for _, src := range sources {
		if src.Name == "fixture" && src.PeriodNs > 0 {
			period = src.PeriodNs
		}
	}
	if want := (counts{150, 150, 150, 150, formatCPU(float64(150*period) / 1e9)}); got != want {
		t.Fatalf("samples per view with comm=xssapp frame=^<img: %+v, want %+v", got, want)
	}
	h := eval[heatmapData](t, b.ctx, `window.heatscope.heatmap()`)
	var want heatmapData
	apitest.GetJSON(t, fx.url+"/api/heatmap?source=fixture&comm=xssapp&frame="+url.QueryEscape("^<img")+"&from="+b.hashParam("from")+"&to="+b.hashParam("to"), &want)
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("heatmap differs from /api/heatmap with the filters")
	}
	for c, col := range h.Values {
		for r, v := range col {
			if v > 0 && h.Rows[r] >= 500 {
				t.Fatalf("cell (%d, %d) at %v ms holds %d samples: xssapp runs only in the first 500 ms", c, r, h.Rows[r], v)
			}
		}
	}
	href := eval[string](t, b.ctx, `document.getElementById('pprof-link').href`)
	if u, err := url.Parse(href); err != nil || u.Query().Get("comm") != "xssapp" || u.Query().Get("frame") != "^<img" {
		t.Fatalf("pprof link %q lacks the filters", href)
	}
}
