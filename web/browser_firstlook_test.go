package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/docs"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// The tests of this file look at the UI as a new user first does.

// TestBrowserAPIReferenceLink follows the footer's link to the API
// reference, on the node view and on a fleet page: the binary serves
// docs/api.md itself, and the browser shows it as text.
func TestBrowserAPIReferenceLink(t *testing.T) {
	fx := newFixture(t, uiStore(t), Options{})
	b := newBrowser(t)
	for _, page := range []string{"/", "/fleet/events"} {
		b.openFresh(fx.url + page)
		if !eval[bool](t, b.ctx, `document.querySelector('footer a[href="/docs/api.md"]') !== null`) {
			t.Fatalf("%s: no link to /docs/api.md in the footer", page)
		}
		resp, err := chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(`footer a[href="/docs/api.md"]`)))
		switch {
		case err != nil:
			t.Fatalf("%s: follow the API reference link: %v", page, err)
		case resp == nil || resp.Status != http.StatusOK || !strings.HasPrefix(resp.MimeType, "text/markdown"):
			t.Fatalf("%s: the API reference link answered %+v, want 200 text/markdown", page, resp)
		}
		shown := eval[string](t, b.ctx, `document.body.innerText`)
		if !strings.HasPrefix(shown, "# heatscope HTTP API") || len(shown) < len(docs.API)/2 {
			t.Errorf("%s: the API reference shows %d characters beginning %q", page, len(shown), shown[:min(60, len(shown))])
		}
	}
	b.screenshot("api-reference.png")
}

// deepFrames is how deep the stacks of TestBrowserPrediffDeepStacks go.
const deepFrames = 150

// TestBrowserPrediffDeepStacks opens the pre-event diff over stacks 150
// frames deep: the flame graph's root is on the first screen (drawn at
// the top), and the checkbox puts it at the bottom and back, in the URL.
func TestBrowserPrediffDeepStacks(t *testing.T) {
	const period = int64(time.Second) / 100
	db, err := store.Open(t.TempDir(), store.Options{Source: "n", Node: "n", PeriodNs: period, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	deep := make([]sample.Frame, deepFrames)
	for i := range deep {
		deep[i] = sample.Frame{Function: fmt.Sprintf("recurse_%03d", deepFrames-i), Module: "/usr/bin/deep", Address: uint64(0x1000 + i), Kind: sample.KindUser}
	}
	shallow := []sample.Frame{{Function: "main", Module: "/usr/bin/deep", Address: 0x900, Kind: sample.KindUser}}
	event := fleetfixture.Start + 10*int64(time.Second)
	for tick := fleetfixture.Start; tick < event; tick += period {
		stack := shallow
		if tick >= event-2*int64(time.Second) {
			stack = deep
		}
		s := sample.Sample{Time: tick, CPU: 0, PID: 7, TID: 7, Comm: "deep", Stack: stack}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AppendEvent(events.Event{Time: event, Source: "test", Severity: events.Warning, Text: "oom",
		Labels: map[string]string{events.KindLabel: "oom-kill"}}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/fleet/prediff#kind=oom-kill&window=2")
	type box struct{ Top, Left, Width float64 }
	root := func() box { return eval[box](t, b.ctx, `window.heatscopeFleetDiff.flameRoot()`) }
	screen := eval[float64](t, b.ctx, `window.innerHeight`)
	depth := eval[string](t, b.ctx, `document.getElementById('pd-flame').dataset.depth`)
	top := root()
	t.Logf("flame graph depth %s; root at %.0f px of a %.0f px screen", depth, top.Top, screen)
	if depth != fmt.Sprint(deepFrames+1) || top.Width < 500 {
		t.Fatalf("the flame graph is %s frames deep, its root %.0f px wide; want %d frames under the command and a full-width root", depth, top.Width, deepFrames+1)
	}
	if top.Top+17 > screen {
		t.Errorf("the flame graph's root is at %.0f px, below the first screen (%.0f px)", top.Top, screen)
	}
	b.screenshot("fleet-prediff-deep.png")
	b.run("root at the bottom", chromedp.Click(chromedp.CSS("#pd-icicle")))
	if bottom := root(); bottom.Top < top.Top+float64(deepFrames)*17 || b.hashParam("rootBottom") != "1" {
		t.Errorf("unchecked: root at %.0f px (it was at %.0f), hash rootBottom %q; want it at the bottom and in the URL", bottom.Top, top.Top, b.hashParam("rootBottom"))
	}
	b.run("root at the top again", chromedp.Click(chromedp.CSS("#pd-icicle")))
	if again := root(); again.Top != top.Top || b.hashParam("rootBottom") != "" {
		t.Errorf("checked again: root at %.0f px, hash rootBottom %q; want it back at %.0f px", again.Top, b.hashParam("rootBottom"), top.Top)
	}
}

// TestBrowserFleetEventsKindOnOneLine lists events whose text is long
// beside their kind: the kind and the node stay on one line each, the
// text wraps.
func TestBrowserFleetEventsKindOnOneLine(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "n", Node: "ip-10-0-1-7", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	text := "sampling frequency changed from 99 Hz to 49 Hz: the agent's CPU (1.37% of one CPU over the last 10 s, " +
		"of which the BPF program 0.41%) went over --max-cpu 1%; " + strings.Repeat("it will raise it again once under 60% of the budget ", 4)
	for i := range 3 {
		if err := db.AppendEvent(events.Event{Time: fleetfixture.Start + int64(i)*int64(time.Minute), Source: "heatscope", Severity: events.Info,
			Text: text, Labels: map[string]string{events.KindLabel: "overhead-guard"}}); err != nil {
			t.Fatal(err)
		}
	}
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + fmt.Sprintf("/fleet/events#from=%d&to=%d", fleetfixture.Start/1e9-60, fleetfixture.Start/1e9+600))
	// The lines a cell's text takes: its text's boxes, one per line.
	lines := eval[[]int](t, b.ctx, `[...document.querySelector('#fe-events tbody tr').cells].slice(1, 5).map((td) => {
		const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length; })`)
	b.screenshot("fleet-events-long-text.png")
	if len(lines) != 4 || lines[0] != 1 || lines[1] != 1 || lines[3] < 2 {
		t.Errorf("lines of node, kind, severity and text: %v; want the node and the kind on one line each, the text wrapped", lines)
	}
}
