package web

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/store"
)

// TestBrowserNodePicker picks nodes of a fleet in the node picker beside
// the source picker: it lists every node with its labels, a pick narrows
// the views to that node (the heatmap drawn is /api/heatmap's for it),
// switches to the node's own source when the one shown is not the node's,
// and goes into the URL.
func TestBrowserNodePicker(t *testing.T) {
	db, counts := fleetStore(t)
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.run("open the fleet", chromedp.Navigate(fx.url+"/"), settled)

	choices := eval[[][]string](t, b.ctx, `window.heatscope.nodeChoices()`)
	want := [][]string{{"", "all 3 nodes"}}
	for _, n := range db.Nodes() {
		want = append(want, []string{n.Name, fmt.Sprintf("%s (zone=%s), %d blocks", n.Name, n.Labels["zone"], n.Blocks)})
	}
	if !reflect.DeepEqual(choices, want) {
		t.Fatalf("node picker %q, want %q", choices, want)
	}

	pick := func(node string) {
		t.Helper()
		b.run("pick "+node, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.getElementById('f-node');
			e.value = %q; e.dispatchEvent(new Event('change')); })()`, node)), settled)
	}
	check := func(node string) {
		t.Helper()
		if got := b.hashParam("node"); got != node {
			t.Fatalf("URL node=%q, want %q", got, node)
		}
		if src := b.hashParam("source"); src != node {
			t.Fatalf("picked %s: source %q, want the node's own source", node, src)
		}
		q := fmt.Sprintf("source=%s&node=%s&from=%s&to=%s&rows=%s", node, node, b.hashParam("from"), b.hashParam("to"), b.hashParam("rows"))
		var drawn, api heatmapData
		drawn = eval[heatmapData](t, b.ctx, `window.heatscope.heatmap()`)
		apitest.GetJSON(t, fx.url+"/api/heatmap?"+q, &api)
		if !reflect.DeepEqual(drawn, api) || api.MaxValue == 0 {
			t.Fatalf("picked %s: the heatmap drawn (busiest %d) is not /api/heatmap?%s (busiest %d)", node, drawn.MaxValue, q, api.MaxValue)
		}
	}
	pick("node-c")
	check("node-c")
	pick("node-a")
	check("node-a")
	if counts["node-a"] == 0 {
		t.Fatal("node-a recorded nothing: the checks prove nothing")
	}

	// The URL alone brings the pick back.
	href := eval[string](t, b.ctx, `location.href`)
	b.run("leave", chromedp.Navigate("about:blank"))
	b.run("reload", chromedp.Navigate(href), settled)
	if v := eval[string](t, b.ctx, `document.getElementById('f-node').value`); v != "node-a" {
		t.Fatalf("after a reload of %s the node picker shows %q", href, v)
	}
	check("node-a")
}

// TestBrowserNoNodes: without any node the picker says so instead of
// showing an empty list.
func TestBrowserNoNodes(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{ReadOnly: true, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.run("open", chromedp.Navigate(fx.url+"/"), settled)
	choices := eval[[][]string](t, b.ctx, `window.heatscope.nodeChoices()`)
	disabled := eval[bool](t, b.ctx, `document.getElementById('f-node').disabled`)
	title := eval[string](t, b.ctx, `document.getElementById('f-node').title`)
	if len(choices) != 1 || choices[0][1] != "no nodes yet" || !disabled || !strings.Contains(title, "No node") {
		t.Fatalf("node picker of an empty server: %q, disabled %v, title %q", choices, disabled, title)
	}
}
