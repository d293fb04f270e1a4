package web

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// writeSample appends a perf script sample of comm at t (Unix seconds)
// with the frames given leaf first.
func writeSample(b *strings.Builder, comm string, t float64, frames ...string) {
	fmt.Fprintf(b, "%s 500/500 [000] %.6f: 10101010 cpu-clock:\n", comm, t)
	for i, f := range frames {
		fmt.Fprintf(b, "\t    %x %s (/usr/bin/%s)\n", 0x401000+0x10*i, f, comm)
	}
	b.WriteString("\n")
}

// The sources of fitStore, all ending before the UI test fixture's.
const (
	gapStart  = base - 2000 // "gappy": 60 s of data, 200 s of nothing, then 30 s
	gapResume = gapStart + 260
	sixStart  = base - 1500 // "six": a 6-second import
	deepStart = base - 1400 // "deep": 6000 shallow samples and one 160 frames deep
	manyStart = base - 1300 // "many": 57 functions
)

// fitStore holds the sources the layout tests look at.
func fitStore(t *testing.T) *store.DB {
	t.Helper()
	db := uiStore(t)
	imp := func(name string, script string) {
		if _, err := db.Import(name, 0, func(fn func(*sample.Sample) error) error {
			return profileio.ReadPerfScript(strings.NewReader(script), fn)
		}); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	for i := range 600 {
		writeSample(&b, "gappy", float64(gapStart)+0.05+float64(i)*0.1, "early_fn", "main")
	}
	for i := range 300 {
		writeSample(&b, "gappy", float64(gapResume)+0.05+float64(i)*0.1, "late_fn", "main")
	}
	imp("gappy", b.String())

	b.Reset()
	for i := range 600 {
		writeSample(&b, "six", float64(sixStart)+0.005+float64(i)*0.01, "six_fn", "main")
	}
	imp("six", b.String())

	b.Reset()
	for i := range 6000 {
		writeSample(&b, "deep", float64(deepStart)+float64(i)*0.001, "leaf_fn", "mid_fn", "main")
	}
	deep := []string{"deepest_fn"}
	for i := range 158 {
		deep = append(deep, fmt.Sprintf("level_%d", 158-i))
	}
	writeSample(&b, "deep", float64(deepStart)+6.5, append(deep, "main")...)
	imp("deep", b.String())

	b.Reset()
	for i := range 57 * 3 {
		// function k has 57-k... samples: a stable order, most first
		k := i % 57
		for range 1 + (57-k)/10 {
			writeSample(&b, "many", float64(manyStart)+float64(i)*0.01, fmt.Sprintf("fn_%02d", k), "main")
		}
	}
	imp("many", b.String())
	return db
}

// TestBrowserDefaultSpanAfterGap opens a source whose last 2 minutes hold
// a 200-second gap: the heatmap opens on the 30 s after it, the data's
// last span, not on the 2 minutes mostly empty.
func TestBrowserDefaultSpanAfterGap(t *testing.T) {
	fx := newFixture(t, fitStore(t), Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/#source=gappy")
	span := eval[[]float64](t, b.ctx, `[window.heatscope.state.from, window.heatscope.state.to]`)
	if want := []float64{gapResume, gapResume + 30}; !reflect.DeepEqual(span, want) {
		t.Errorf("span %v, want %v (the 30 s after the gap)", span, want)
	}
	if cols := len(eval[heatmapData](t, b.ctx, `window.heatscope.heatmap()`).Columns); cols != 30 {
		t.Errorf("heatmap of %d columns, want 30", cols)
	}
	// Without a gap, a source shorter than 2 minutes opens whole.
	b.openFresh(fx.url + "/#source=six")
	span = eval[[]float64](t, b.ctx, `[window.heatscope.state.from, window.heatscope.state.to]`)
	if want := []float64{sixStart, sixStart + 6}; !reflect.DeepEqual(span, want) {
		t.Errorf("six: span %v, want %v", span, want)
	}
}

// TestBrowserLayoutFits measures the views' sizes: a 6-second import's
// heatmap fills its box's width, and a flame graph whose deepest stack is
// too narrow to draw is as tall as what it draws, not as the stack.
func TestBrowserLayoutFits(t *testing.T) {
	fx := newFixture(t, fitStore(t), Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/#source=six")
	type size struct{ Canvas, Box, CellW, Cols float64 }
	sz := eval[size](t, b.ctx, `(() => { const c = document.getElementById('heatmap');
		return {Canvas: c.getBoundingClientRect().width, Box: c.parentElement.clientWidth, CellW: +c.dataset.cellW, Cols: +c.dataset.cols}; })()`)
	if sz.Cols != 6 || sz.Canvas < 0.97*sz.Box || sz.Canvas > sz.Box || sz.CellW < 100 {
		t.Errorf("6 s heatmap: canvas %v px wide in a box of %v, %v columns of %v px", sz.Canvas, sz.Box, sz.Cols, sz.CellW)
	}
	b.screenshot("fit-six.png")

	b.openFresh(fx.url + "/#source=deep")
	type flame struct {
		Height, Width, TreeDepth, Drawn, TopY float64
	}
	fl := eval[flame](t, b.ctx, `(() => { const c = document.getElementById('flame'), t = window.heatscope.flameTree();
		let deepest = 0; const ends = [];
		for (let i = 0; i < t.n; i++) { while (ends.length && ends[ends.length - 1] <= i) ends.pop(); deepest = Math.max(deepest, ends.length); ends.push(i + t.size[i]); }
		const rects = window.heatscope.flameBoxes;
		return {Height: c.getBoundingClientRect().height, Width: c.getBoundingClientRect().width, TreeDepth: deepest,
			Drawn: +c.dataset.depth, TopY: Math.min(...['root', 'deep', 'main', 'mid_fn', 'leaf_fn'].flatMap((n) => rects(n).map((r) => r.y)))}; })()`)
	// root, deep, main, mid_fn, leaf_fn: depth 4, 5 rows of 17 px; the
	// deep stack (161 frames under deep) is 1/6001 of the width, 0.2 px.
	if fl.TreeDepth != 161 || fl.Drawn != 4 || fl.Height != 5*17 || fl.TopY != 0 {
		t.Errorf("flame graph: tree depth %v, drawn depth %v, canvas %v px tall, top frame at y %v; want 161, 4, 85, 0", fl.TreeDepth, fl.Drawn, fl.Height, fl.TopY)
	}
	b.run("icicle", chromedp.Click("#icicle"))
	if h := eval[float64](t, b.ctx, `document.getElementById('flame').getBoundingClientRect().height`); h != 5*17 {
		t.Errorf("icicle: canvas %v px tall, want 85", h)
	}
	b.screenshot("fit-deep.png")
}

// TestBrowserTopMore checks that the top functions table shows 20 rows,
// and 20 more at each click on "more", down to the last.
func TestBrowserTopMore(t *testing.T) {
	fx := newFixture(t, fitStore(t), Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/#source=many")
	type table struct {
		Rows        int
		First, Last string
		More        string
		MoreHidden  bool
		Count       string
	}
	read := func() table {
		return eval[table](t, b.ctx, `(() => { const rows = document.querySelector('#top tbody').rows, m = document.getElementById('top-more');
			return {Rows: rows.length, First: rows.length ? rows[0].cells[0].textContent : '', Last: rows.length ? rows[rows.length - 1].cells[0].textContent : '',
				More: m.textContent, MoreHidden: m.hidden, Count: document.getElementById('top-count').textContent}; })()`)
	}
	// 58 functions: fn_00 .. fn_56 and main (most samples in total, none self).
	want := []table{
		{20, "fn_00", "fn_19", "20 more", false, "20 of 58 functions"},
		{40, "fn_00", "fn_39", "18 more", false, "40 of 58 functions"},
		{58, "fn_00", "main", "0 more", true, "58 of 58 functions"},
	}
	for i, w := range want {
		if got := read(); got != w {
			t.Errorf("after %d clicks: %+v, want %+v", i, got, w)
		}
		if i < len(want)-1 {
			b.run("more", chromedp.Click("#top-more"))
		}
	}
	// A new selection starts again at 20 rows.
	b.run("a filter", chromedp.SetValue("#f-frame", "fn_"), chromedp.Click("#f-apply"), settled)
	if got := read(); got.Rows != 20 || got.MoreHidden {
		t.Errorf("after a new query: %+v", got)
	}
}

// TestBrowserBadRegexp applies a command filter that is not a regexp: the
// field is marked with the API's message, and no view, no state and no URL
// changes; a good filter then applies and clears the mark, and the bad one
// opened fresh is marked too.
func TestBrowserBadRegexp(t *testing.T) {
	fx := newFixture(t, uiStore(t), Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/")
	type views struct {
		Heatmap                      heatmapData
		HeatmapDraws, PerCPUDraws    string
		FlameDraws, TimelineDraws    string
		Top, Hash, Comm, Status      string
		Flame                        []string
		Invalid, AriaInvalid, Error  string
		ErrorHidden, FieldHasInvalid bool
	}
	read := func() views {
		return eval[views](t, b.ctx, `(() => { const $ = (id) => document.getElementById(id), f = $('f-comm');
			return {Heatmap: window.heatscope.heatmap(), HeatmapDraws: $('heatmap').dataset.draws, PerCPUDraws: $('percpu').dataset.draws,
				FlameDraws: $('flame').dataset.draws, TimelineDraws: $('timeline').dataset.draws,
				Top: document.querySelector('#top tbody').textContent, Hash: location.hash, Comm: window.heatscope.state.comm,
				Status: $('status').textContent, Flame: window.heatscope.flameNames(),
				Invalid: f.title, AriaInvalid: f.getAttribute('aria-invalid') || '', Error: $('filter-error').textContent,
				ErrorHidden: $('filter-error').hidden, FieldHasInvalid: f.classList.contains('invalid')}; })()`)
	}
	before := read()
	if before.FieldHasInvalid || !before.ErrorHidden || before.Top == "" {
		t.Fatalf("before: %+v", before)
	}
	b.run("apply a bad regexp", chromedp.SetValue("#f-comm", "~["), chromedp.Click("#f-apply"), settled)
	after := read()
	const msg = "missing closing ]"
	if !after.FieldHasInvalid || after.AriaInvalid != "true" || !strings.Contains(after.Invalid, msg) ||
		after.ErrorHidden || !strings.HasPrefix(after.Error, "comm: ") || !strings.Contains(after.Error, msg) {
		t.Errorf("bad regexp: field marked %v (aria %q, title %q), message %q (hidden %v)",
			after.FieldHasInvalid, after.AriaInvalid, after.Invalid, after.Error, after.ErrorHidden)
	}
	// Every view as it was: not redrawn, same data, same state and URL.
	unchanged := after
	unchanged.Invalid, unchanged.AriaInvalid, unchanged.Error, unchanged.ErrorHidden, unchanged.FieldHasInvalid =
		before.Invalid, before.AriaInvalid, before.Error, before.ErrorHidden, before.FieldHasInvalid
	if !reflect.DeepEqual(unchanged, before) {
		t.Errorf("a view changed:\nbefore %+v\nafter  %+v", before, after)
	}
	b.screenshot("bad-regexp.png")

	b.run("apply a good filter", chromedp.SetValue("#f-comm", "hotapp"), chromedp.Click("#f-apply"), settled)
	good := read()
	if good.FieldHasInvalid || !good.ErrorHidden || good.Comm != "hotapp" || b.hashParam("comm") != "hotapp" || strings.Contains(good.Top, xssName) {
		t.Errorf("good filter: %+v", good)
	}

	b.openFresh(fx.url + "/#comm=~%5B")
	fresh := read()
	if !fresh.FieldHasInvalid || !strings.Contains(fresh.Error, msg) {
		t.Errorf("opened fresh: %+v", fresh)
	}
}
