package web

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// emptyNotes are the empty-state notes of the views that show samples.
var emptyNotes = []string{"timeline-empty", "heatmap-empty", "percpu-empty", "flame-empty", "top-empty"}

// notes reads the shown empty-state notes: id -> text ("" when hidden).
func (b *browser) notes(ids ...string) map[string]string {
	b.t.Helper()
	return eval[map[string]string](b.t, b.ctx, fmt.Sprintf(`Object.fromEntries(%s.map((id) => {
		const el = document.getElementById(id); return [id, el.hidden ? '' : el.textContent]; }))`, jsStrings(ids)))
}

func jsStrings(list []string) string {
	return "['" + strings.Join(list, "','") + "']"
}

// topRows counts the rows of the top functions table.
func (b *browser) topRows() int {
	b.t.Helper()
	return eval[int](b.t, b.ctx, `document.querySelector('#top tbody').rows.length`)
}

// openFresh loads url in a new document (not a hash change) and waits
// until the page has finished loading.
func (b *browser) openFresh(url string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate("about:blank"), chromedp.Navigate(url), settled)
}

// TestBrowserEmptyStates opens views no sample reaches (a command that
// does not exist, a window before the data, a comparison of two such
// windows) fresh and through the filter bar: each view shows the API's
// message, which says which filter and window match none of how many
// samples, or where the data is; the top table keeps none of the previous
// rows, the page finishes loading, and no JavaScript error happens (the
// browser's cleanup fails the test on any exception or console error).
func TestBrowserEmptyStates(t *testing.T) {
	db := uiStore(t)
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	first := float64(base) + 0.3 // the fixture's first sample
	fixture := db.SourcesOf(&store.Filter{Sources: []string{"fixture"}})[0]
	ft := query.FormatTime
	// The heatmap's window: the seconds the capture touches.
	heatmapR := store.Range{From: base * 1e9, To: (base + 4) * 1e9}
	inHeatmap := countIn(t, db, heatmapR, &store.Filter{Sources: []string{"fixture"}})

	// A filter that matches nothing, opened fresh.
	b.openFresh(fx.url + "/#source=fixture&comm=nosuchcommand")
	for id, text := range b.notes(emptyNotes...) {
		if !strings.HasPrefix(text, "None of the ") || !strings.Contains(text, ` samples of source "fixture" from `) ||
			!strings.HasSuffix(text, ` passes the filter comm "nosuchcommand".`) {
			t.Errorf("%s: %q, want none of the samples of the window passing the filter", id, text)
		}
	}
	if got, want := b.notes("heatmap-empty")["heatmap-empty"], fmt.Sprintf(`None of the %d samples of source "fixture" from %s to %s passes the filter comm "nosuchcommand".`,
		inHeatmap, ft(heatmapR.From), ft(heatmapR.To)); got != want {
		t.Errorf("heatmap note %q, want %q", got, want)
	}
	if n := b.topRows(); n != 0 {
		t.Errorf("top table: %d rows, want none", n)
	}
	if got := eval[bool](t, b.ctx, `document.getElementById('flame-box').hidden && document.getElementById('pprof-link').hidden`); !got {
		t.Error("the empty flame graph's canvas, or its pprof link, is shown")
	}
	b.screenshot("empty-filter.png")

	// Through the filter bar: the top table had rows, and loses them all.
	b.openFresh(fx.url + "/#source=fixture")
	if n := b.topRows(); n == 0 {
		t.Fatal("top table empty without a filter")
	}
	for id, text := range b.notes(emptyNotes...) {
		if text != "" {
			t.Errorf("%s shown without a filter: %q", id, text)
		}
	}
	b.run("filter on a command that does not exist",
		chromedp.SetValue("#f-comm", "~^nosuch"), chromedp.Click("#f-apply"), settled)
	for id, text := range b.notes(emptyNotes...) {
		if !strings.HasPrefix(text, "None of the ") || !strings.HasSuffix(text, ` passes the filter comm "~^nosuch".`) {
			t.Errorf("after apply, %s: %q, want none passing the filter", id, text)
		}
	}
	if n := b.topRows(); n != 0 {
		t.Errorf("after apply, top table: %d rows, want none", n)
	}

	// A window before the data: no filter, no sample.
	from, to := ftoa(float64(base)-20), ftoa(float64(base)-10)
	b.openFresh(fx.url + "/#source=fixture&from=" + from + "&to=" + to)
	// It says where the source's samples are.
	want := fmt.Sprintf(`No samples of source "fixture" from %s to %s: they span %s to %s.`,
		ft((base-20)*1e9), ft((base-10)*1e9), ft(fixture.First), ft(fixture.Last))
	for _, id := range []string{"heatmap-empty", "percpu-empty", "flame-empty", "top-empty"} {
		if got := b.notes(id)[id]; got != want {
			t.Errorf("window before the data, %s: %q, want %q", id, got, want)
		}
	}
	// The same window in a link that names no source: the default source
	// is picked, the window kept (it used to be replaced, unsaid, by the
	// data's last span).
	b.openFresh(fx.url + "/#from=" + from + "&to=" + to)
	if got := b.notes("heatmap-empty")["heatmap-empty"]; got != want {
		t.Errorf("window before the data, no source named: %q, want %q", got, want)
	}
	b.openFresh(fx.url + "/#source=fixture&from=" + from + "&to=" + to)
	if got := b.notes("timeline-empty")["timeline-empty"]; got != "" {
		t.Errorf("the timeline shows all the data, and has samples: %q", got)
	}
	if got := eval[string](t, b.ctx, `document.getElementById('events').textContent`); got != "No events in the heatmap's span (2026-11-21 05:02:40.000 UTC + 10 s)." {
		t.Errorf("events: %q", got)
	}
	b.screenshot("empty-window.png")

	// A comparison of two windows that hold nothing for the filter.
	sf, st := ftoa(first+1), ftoa(first+2)
	bf, bt := ftoa(first), ftoa(first+1)
	b.openFresh(fx.url + "/#source=fixture&from=" + ftoa(base) + "&to=" + ftoa(base+4) + "&comm=nosuchcommand&sf=" + sf + "&st=" + st + "&cmp=1&bf=" + bf + "&bt=" + bt)
	if !eval[bool](t, b.ctx, `window.heatscope.state.compare`) {
		t.Fatal("not in compare mode")
	}
	notes := b.notes("flame-empty", "growth-empty", "top-empty")
	if !strings.HasPrefix(notes["top-empty"], "None of the ") {
		t.Errorf("compare, top-empty: %q", notes["top-empty"])
	}
	for _, id := range []string{"flame-empty", "growth-empty"} {
		if text := notes[id]; !strings.HasPrefix(text, `The selection A (from, to): none of the `) ||
			!strings.Contains(text, `; the baseline B (from2, to2): none of the `) || !strings.HasSuffix(text, ` passes the filter comm "nosuchcommand".`) {
			t.Errorf("compare, %s names not both windows: %q", id, text)
		}
	}
	if n := eval[int](t, b.ctx, `document.querySelector('#growth tbody').rows.length`); n != 0 {
		t.Errorf("growth table: %d rows", n)
	}
	b.screenshot("empty-compare.png")
}
