package web

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestBrowserRelativeSource opens an import whose times are its capture's
// own clock (a perf script 2243 s after its machine booted, no wall time):
// every time the labels and the heatmap's tooltip show is seconds from the
// first sample's second ("t=…"), an empty state's message writes the API's
// seconds on the capture's clock and where t=0 is on it, and nothing is a
// date in 1970.
func TestBrowserRelativeSource(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var script strings.Builder
	for i := range 400 {
		fmt.Fprintf(&script, "burn 7/7 [%03d] %.6f: 10101010 cpu-clock:\n\t    400100 spin (/usr/bin/burn)\n\n", i%2, 2243.25+float64(i)*0.01)
	}
	if _, err := db.ImportWith("boot", store.ImportOptions{PeriodNs: 10101010, Relative: true}, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(script.String()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/#source=boot")
	type page struct{ Text, Span, Flame string }
	read := func() page {
		return eval[page](t, b.ctx, `({Text: document.body.innerText, Span: document.getElementById('span-label').textContent,
			Flame: document.getElementById('flame-label').textContent})`)
	}
	p := read()
	if !strings.Contains(p.Span, "heatmap span t=") || !strings.Contains(p.Span, "times relative") || strings.Contains(p.Text, "1970") {
		t.Fatalf("span label %q; the page says 1970: %v", p.Span, strings.Contains(p.Text, "1970"))
	}

	// The heatmap's tooltip over the first sample's cell: times count from
	// the start of its second, the heatmap's first column.
	l := b.heatmapLayout()
	_, _, x, y := l.cellCentre(0, l.Rows-1)
	b.run("hover the heatmap", chromedp.MouseEvent(chromedp.MouseMoved, x, y))
	tip := eval[string](t, b.ctx, `document.getElementById('tooltip').textContent`)
	if !strings.HasPrefix(tip, "time: t=0.000 s (second 0)") || strings.Contains(tip, "1970") {
		t.Fatalf("heatmap tooltip %q, want the time from the first sample", tip)
	}
	b.screenshot("relative-source.png")

	// An empty state's note writes times on the capture's clock, as the
	// API does, and says where the views' t=0 is on it.
	b.openFresh(fx.url + "/#source=boot&comm=nosuchcommand")
	p = read()
	if note := b.notes("heatmap-empty")["heatmap-empty"]; !strings.Contains(note, "(times on the capture's own clock, in seconds: no wall time)") ||
		!strings.HasSuffix(note, "(The views' t=0 is 2243 s on that clock.)") || strings.Contains(p.Text, "1970") {
		t.Fatalf("empty heatmap note %q; the page says 1970: %v", note, strings.Contains(p.Text, "1970"))
	}
}
