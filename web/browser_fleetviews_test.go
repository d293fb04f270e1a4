package web

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/store"
)

type feRow struct{ Node, Kind string }

type pdFunction struct{ Name, Kind, GrewBefore string }

// TestBrowserFleetEvents walks the fleet events page over a bucket in
// MinIO: every node's events with the counts by kind and node, a click on
// a kind or a node narrows the list, the node filter takes ~regexp, a
// node without events says so, a bad filter marks its input, the header
// links the fleet pages, and an event links to its node's view with the
// window before it compared.
func TestBrowserFleetEvents(t *testing.T) {
	fx := newFixture(t, bucketFleet(t), Options{})
	b := newBrowser(t)
	text := func(id string) string {
		return eval[string](t, b.ctx, fmt.Sprintf(`document.getElementById(%q).textContent`, id))
	}
	rows := func() []feRow { return eval[[]feRow](t, b.ctx, `window.heatscopeFleetEvents.rows()`) }
	b.openFresh(fx.url + "/fleet/events")
	if s := text("fe-summary"); s != "5 events on 3 nodes" {
		t.Fatalf("summary %q", s)
	}
	if got := rows(); len(got) != 5 || got[0] != (feRow{"n1", "ena-reset"}) || got[2] != (feRow{"n3", "cpu-saturation"}) {
		t.Fatalf("rows %v", got)
	}
	counts := eval[[]string](t, b.ctx, `[...document.querySelectorAll('#fe-kinds tbody tr, #fe-nodes tbody tr')].map((tr) => tr.cells[0].textContent + ' ' + tr.cells[1].textContent)`)
	if strings.Join(counts, ", ") != "ena-reset 4, cpu-saturation 1, n1 2, n2 2, n3 1" {
		t.Errorf("counts by kind and node: %q", counts)
	}
	b.screenshot("fleet-events.png")

	// A click on a kind's row shows that kind only.
	b.run("pick ena-reset", chromedp.Click(chromedp.CSS(`#fe-kinds tbody tr[data-name="ena-reset"]`)), settled)
	if got := rows(); len(got) != 4 || slices.ContainsFunc(got, func(r feRow) bool { return r.Kind != "ena-reset" }) || b.hashParam("kind") != "ena-reset" {
		t.Fatalf("after picking ena-reset: rows %v, hash kind %q", got, b.hashParam("kind"))
	}
	// The node filter: a regular expression.
	b.run("filter nodes", chromedp.SetValue(chromedp.CSS("#fe-node"), "~^n[23]$"), chromedp.Click(chromedp.CSS("#fe-apply")), settled)
	if got := rows(); len(got) != 2 || got[0].Node != "n2" || got[1].Node != "n2" {
		t.Fatalf("ena-reset on ~^n[23]$: %v", got)
	}
	// A node without events says so.
	b.run("n4", chromedp.SetValue(chromedp.CSS("#fe-node"), "n4"), chromedp.Click(chromedp.CSS("#fe-apply")), settled)
	if got, note := rows(), text("fe-empty"); len(got) != 0 || note != "no event on the selected nodes" {
		t.Fatalf("n4: rows %v, note %q", got, note)
	}
	// A bad filter: the error names it and marks its input.
	b.run("bad node", chromedp.SetValue(chromedp.CSS("#fe-node"), "~("), chromedp.Click(chromedp.CSS("#fe-apply")), settled)
	if msg, invalid := text("fe-error"), eval[bool](t, b.ctx, `document.getElementById('fe-node').classList.contains('invalid')`); !strings.HasPrefix(msg, "node: bad regular expression") || !invalid {
		t.Fatalf("bad node filter: error %q, input marked %v", msg, invalid)
	}

	// The header: the same links on both pages, the page's own marked;
	// one leads to the other.
	nav := func() string {
		return eval[string](t, b.ctx, `[...document.querySelectorAll('header .fleet-nav a')].map((a) => (a.getAttribute('aria-current') === 'page' ? '*' : '') + a.textContent + ' ' + a.getAttribute('href')).join(', ')`)
	}
	if got := nav(); got != "node view /, *fleet events /fleet/events, pre-event diff /fleet/prediff" {
		t.Errorf("fleet events' header links: %q", got)
	}
	switch resp, err := chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(`.fleet-nav a[href="/fleet/prediff"]`))); {
	case err != nil:
		t.Fatalf("follow the pre-event diff link: %v", err)
	case resp == nil:
		t.Fatal("follow the pre-event diff link: the click loaded no page")
	case resp.Status != 200:
		t.Fatalf("follow the pre-event diff link: HTTP %d %s", resp.Status, resp.StatusText)
	}
	b.run("the pre-event diff loaded", settled)
	if got, title := nav(), eval[string](t, b.ctx, `document.title`); got != "node view /, fleet events /fleet/events, *pre-event diff /fleet/prediff" || title != "heatscope: what grew before the events" {
		t.Errorf("pre-event diff's header links: %q, title %q", got, title)
	}
	b.screenshot("fleet-prediff-header.png")

	// An event's link opens its node's view with the 5 s before it
	// compared with the 5 s before those.
	b.openFresh(fx.url + "/fleet/events#kind=ena-reset&node=n2")
	href := eval[string](t, b.ctx, `document.querySelector('#fe-events tbody tr a').href`)
	b.run("open the node view", chromedp.Navigate(href), settled)
	st := eval[map[string]any](t, b.ctx, `(() => { const s = window.heatscope.state; return {node: s.node, sf: s.selFrom, st: s.selTo, bf: s.bFrom, bt: s.bTo, cmp: s.compare, norm: s.norm}; })()`)
	ev := float64(fleetfixture.Start/1e9 + 25)
	if st["node"] != "n2" || st["cmp"] != true || st["norm"] != "length" || st["st"].(float64) != ev || st["sf"].(float64) != ev-5 || st["bf"].(float64) != ev-10 {
		t.Fatalf("node view from the event's link: %v", st)
	}
}

// TestBrowserFleetPrediff walks the pre-event diff page over a bucket in
// MinIO: the kinds offered, the resets' windows of 2 s compared, the
// culprit on top of the functions that grew, "4 of 4 ena-reset events,
// on 2 of 2 nodes", red in the differential flame graph; a click on its
// row shows it per node and per event; a node's row narrows to that node;
// a kind without events and a bad window say so.
func TestBrowserFleetPrediff(t *testing.T) {
	fx := newFixture(t, bucketFleet(t), Options{})
	b := newBrowser(t)
	text := func(id string) string {
		return eval[string](t, b.ctx, fmt.Sprintf(`document.getElementById(%q).textContent`, id))
	}
	functions := func() []pdFunction { return eval[[]pdFunction](t, b.ctx, `window.heatscopeFleetDiff.functions()`) }
	b.openFresh(fx.url + "/fleet/prediff")
	kinds := eval[[]string](t, b.ctx, `[...document.getElementById('pd-kind').options].map((o) => o.textContent)`)
	if strings.Join(kinds, ", ") != "ena-reset (4), cpu-saturation (1)" || b.hashParam("kind") != "ena-reset" {
		t.Fatalf("kinds offered %q, picked %q", kinds, b.hashParam("kind"))
	}
	b.run("window 2 s", chromedp.SetValue(chromedp.CSS("#pd-window"), "2"), chromedp.Click(chromedp.CSS("#pd-apply")), settled)
	if s := text("pd-summary"); s != "4 ena-reset events on 2 nodes; A: the 2 s before each, 16 s of CPU time; B: the 2 s before those, 8 s" {
		t.Errorf("summary %q", s)
	}
	fns := functions()
	if len(fns) != 1 || fns[0] != (pdFunction{fleetfixture.Culprit, "kernel", "4 of 4 ena-reset events, on 2 of 2 nodes"}) ||
		text("pd-hidden") != "1 pass-through caller hidden" {
		t.Fatalf("functions that grew: %v (%s); want the culprit alone, its caller a hidden pass-through", fns, text("pd-hidden"))
	}
	b.run("show pass-throughs", chromedp.Click(chromedp.CSS("#pd-collapse")), settled)
	if fns := functions(); len(fns) != 2 || fns[1].Name != fleetfixture.CulpritCaller || b.hashParam("passthru") != "1" {
		t.Fatalf("with pass-throughs: %v", fns)
	}
	b.run("hide pass-throughs", chromedp.Click(chromedp.CSS("#pd-collapse")), settled)
	names := eval[[]string](t, b.ctx, `window.heatscopeFleetDiff.flameNames()`)
	if !slices.Contains(names, fleetfixture.Culprit) || !slices.Contains(names, fleetfixture.CulpritComm) || !slices.Contains(names, fleetfixture.Steady) {
		t.Errorf("flame graph frames %q", names)
	}
	// The tree's figures are CPU ns: the culprit 8 cpu-s in A, none in B.
	var culprit []float64
	culprit = eval[[]float64](t, b.ctx, fmt.Sprintf(`(() => { const t = window.heatscopeFleetDiff.flameTree();
		for (let i = 0; i < t.n; i++) if (t.names[t.name[i]] === %q) return [t.a[i], t.b[i], t.deltaTotal[i]]; return []; })()`, fleetfixture.Culprit))
	if len(culprit) != 3 || culprit[0] != 8e9 || culprit[1] != 0 || culprit[2] != 8e9 {
		t.Errorf("the culprit in the tree: %v, want A 8e9 ns, B 0, +8e9", culprit)
	}
	b.screenshot("fleet-prediff.png")

	// The culprit per node and per event.
	b.run("click the culprit", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#pd-functions tbody tr[data-name=%q]`, fleetfixture.Culprit))), settled)
	perNode := eval[[]string](t, b.ctx, `[...document.querySelectorAll('#pd-nodes tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent).join(' | '))`)
	if strings.Join(perNode, "; ") != "n1 | 2 | 2 of 2 | 4 s | 0 s | +4 s; n2 | 2 | 2 of 2 | 4 s | 0 s | +4 s" {
		t.Errorf("per node: %q", perNode)
	}
	grew := eval[[]string](t, b.ctx, `[...document.querySelectorAll('#pd-events tbody tr')].map((tr) => tr.dataset.node + ':' + tr.dataset.grew)`)
	if strings.Join(grew, " ") != "n1:1 n2:1 n1:1 n2:1" || b.hashParam("fn") != fleetfixture.Culprit {
		t.Errorf("per event (node:grew): %v, hash fn %q", grew, b.hashParam("fn"))
	}
	b.screenshot("fleet-prediff-focus.png")
	// A node's row: only its events.
	b.run("click n2", chromedp.Click(chromedp.CSS(`#pd-nodes tbody tr[data-node="n2"]`)), settled)
	if fns := functions(); b.hashParam("node") != "n2" || len(fns) == 0 || fns[0].GrewBefore != "2 of 2 ena-reset events, on 1 of 1 node" {
		t.Errorf("after clicking n2: node %q, functions %v", b.hashParam("node"), fns)
	}

	// No event of the kind, a bad window.
	b.openFresh(fx.url + "/fleet/prediff#kind=oom-kill&window=2")
	if note := text("pd-empty"); note != "no oom-kill event on any node; the events there are of kinds ena-reset (4), cpu-saturation (1)" || len(functions()) != 0 {
		t.Errorf("oom-kill: note %q", note)
	}
	b.openFresh(fx.url + "/fleet/prediff#kind=ena-reset&window=" + url.QueryEscape("7200"))
	if msg, invalid := text("pd-error"), eval[bool](t, b.ctx, `document.getElementById('pd-window').classList.contains('invalid')`); !strings.HasPrefix(msg, "window:") || !invalid {
		t.Errorf("a 2 h window: error %q, input marked %v", msg, invalid)
	}
}

// TestBrowserFleetPrediffDefaultKind: the pre-event diff page picks the
// most frequent incident, not the overhead guard's episodes that outnumber
// it; with no incident it picks nothing and says why.
func TestBrowserFleetPrediffDefaultKind(t *testing.T) {
	b := newBrowser(t)
	for _, c := range []struct {
		kinds          []string
		picked, offers string
	}{
		{[]string{"overhead-guard", "overhead-guard", "overhead-guard", "oom-kill"}, "oom-kill", "overhead-guard (3), oom-kill (1)"},
		{[]string{"overhead-guard", "overhead-guard"}, "", "choose a kind, overhead-guard (2)"},
	} {
		db, err := store.Open(t.TempDir(), store.Options{Source: "n", Node: "n", Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		for i, kind := range c.kinds {
			e := events.Event{Time: fleetfixture.Start + int64(i)*int64(time.Minute), Source: "heatscope", Severity: events.Warning,
				Text: kind, Labels: map[string]string{events.KindLabel: kind}}
			if err := db.AppendEvent(e); err != nil {
				t.Fatal(err)
			}
		}
		fx := newFixture(t, db, Options{})
		b.openFresh(fx.url + "/fleet/prediff")
		offers := eval[[]string](t, b.ctx, `[...document.getElementById('pd-kind').options].map((o) => o.textContent)`)
		if strings.Join(offers, ", ") != c.offers || b.hashParam("kind") != c.picked {
			t.Errorf("kinds %v: offered %q, picked %q; want %q, %q", c.kinds, offers, b.hashParam("kind"), c.offers, c.picked)
		}
		if empty := eval[string](t, b.ctx, `document.getElementById('pd-empty').hidden ? '' : document.getElementById('pd-empty').textContent`); c.picked == "" &&
			!strings.Contains(empty, "choose a kind to compare before") {
			t.Errorf("kinds %v: the page says %q", c.kinds, empty)
		}
		db.Close()
	}
}
