package web

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/apitest"
)

// nestFlameJS rebuilds the API's nested JSON flame graph from the tree the
// UI decoded and draws.
const nestFlameJS = `(() => {
	const t = window.heatscope.flameTree();
	const build = (i) => {
		const o = { name: t.names[t.name[i]], kind: t.kinds[t.kind[i]], value: t.value[i], self: t.self[i] };
		const kids = [];
		for (let c = i + 1, end = i + t.size[i]; c < end; c += t.size[c]) kids.push(build(c));
		if (kids.length) o.children = kids;
		return o;
	};
	return JSON.stringify(build(0));
})()`

// flameNode is a node of /api/flamegraph's nested answer.
type flameNode struct {
	Name     string      `json:"name"`
	Kind     string      `json:"kind"`
	Value    int64       `json:"value"`
	Children []flameNode `json:"children"`
}

// topRow is a row of the UI's top-functions table, or of /api/top.
type topRow struct {
	Name     string  `json:"name"`
	Kind     string  `json:"kind"`
	Group    string  `json:"group"`
	SelfCPU  float64 `json:"selfCpu"`
	TotalCPU float64 `json:"totalCpu"`
}

// shown is the row as the top table shows it: its CPU times formatted,
// its kind named as the legend names it.
func (r topRow) shown() topRow {
	r.SelfCPU, r.TotalCPU = 0, 0
	r.Kind = kindShown(r.Kind)
	return r
}

// TestBrowserContainerFilters sets the container, pod, namespace and QoS
// filters in the filter bar and the flame graph's group-by, and checks
// that the heatmap, the flame graph and the top functions drawn are the
// API's answers for the same filters (and not the unfiltered ones), that
// grouping puts one node per container or namespace under the root, and
// that the URL reproduces the view on a fresh load.
func TestBrowserContainerFilters(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	b := newBrowser(t)
	from, to := base+10, base+40
	span := fmt.Sprintf("source=host&from=%d&to=%d", from, to)
	b.run("open 30 s of the host", chromedp.Navigate(fmt.Sprintf("%s/#%s", fx.url, span)), settled)

	// checkViews compares what the page shows with the API's answers for
	// query (the span plus the filters), and returns the flame graph.
	checkViews := func(what, filters, group string) flameNode {
		t.Helper()
		q := span + filters
		var heat, wantHeat heatmapData
		heat = eval[heatmapData](t, b.ctx, `window.heatscope.heatmap()`)
		apitest.GetJSON(t, fmt.Sprintf("%s/api/heatmap?%s&rows=50", fx.url, q), &wantHeat)
		if !reflect.DeepEqual(heat, wantHeat) {
			t.Fatalf("%s: the heatmap drawn (busiest %d) is not /api/heatmap?%s (busiest %d)", what, heat.MaxValue, q, wantHeat.MaxValue)
		}
		fq := q
		if group != "" {
			fq += "&group=" + group
		}
		resp, wantFlame := fx.get(t, "/api/flamegraph?"+fq)
		mustOK(t, "flame graph", resp, wantFlame)
		gotFlame := eval[string](t, b.ctx, nestFlameJS)
		var got, want flameNode
		if err := json.Unmarshal([]byte(gotFlame), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(wantFlame, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the flame graph drawn (%d samples, %d children) is not /api/flamegraph?%s (%d, %d)",
				what, got.Value, len(got.Children), fq, want.Value, len(want.Children))
		}
		rows := eval[[][]string](t, b.ctx, `[...document.getElementById('top').tBodies[0].rows].map((r) => [...r.cells].map((c) => c.textContent))`)
		var wantTop struct {
			Functions []topRow `json:"functions"`
		}
		// the table shows the first 20 rows until "more" is clicked
		apitest.GetJSON(t, fmt.Sprintf("%s/api/top?%s&limit=20", fx.url, fq), &wantTop)
		var gotTop []topRow
		for _, r := range rows {
			var row topRow
			if len(r) != 6 {
				t.Fatalf("%s: top row %q", what, r)
			}
			row.Name, row.Kind = r[0], r[1]
			if name, group, ok := strings.Cut(row.Name, " · "); ok {
				row.Name, row.Group = name, group
			}
			if (row.Group != "") != (group != "") {
				t.Fatalf("%s: top row %q: grouped by %q but the row names group %q", what, r, group, row.Group)
			}
			// The CPU time columns are the API's, formatted with their unit.
			if i := len(gotTop); i < len(wantTop.Functions) &&
				(r[2] != formatCPU(wantTop.Functions[i].SelfCPU) || r[4] != formatCPU(wantTop.Functions[i].TotalCPU)) {
				t.Fatalf("%s: top row %q, want self %s and total %s", what, r, formatCPU(wantTop.Functions[i].SelfCPU), formatCPU(wantTop.Functions[i].TotalCPU))
			}
			gotTop = append(gotTop, row)
		}
		var wantRows []topRow
		for _, f := range wantTop.Functions {
			wantRows = append(wantRows, f.shown())
		}
		if len(gotTop) == 0 || !slices.Equal(gotTop, wantRows) {
			t.Fatalf("%s: the top functions shown (%d) are not /api/top?%s (%d)", what, len(gotTop), fq, len(wantTop.Functions))
		}
		return got
	}
	unfiltered := checkViews("no filter", "", "")
	// setInput types v into a control of the page, and fires its change
	// event when it has one of its own.
	setInput := func(id, v string, change bool) {
		t.Helper()
		js := fmt.Sprintf(`(() => { const e = document.getElementById(%q); e.value = %q; if (e.value !== %q) throw new Error('no such value');
			if (%t) e.dispatchEvent(new Event('change')); })()`, id, v, v, change)
		b.run("set "+id, chromedp.Evaluate[chromedp.Void](js))
	}

	// Each filter alone, through the bar: the views are the API's for it,
	// and fewer samples than unfiltered.
	single := map[string]string{"container": "istio-proxy", "pod": "etl-1", "namespace": "shop", "qos": "burstable"}
	for _, name := range []string{"container", "pod", "namespace", "qos"} {
		for other := range single {
			setInput("f-"+other, "", false)
		}
		setInput("f-"+name, single[name], false)
		b.run("apply "+name, chromedp.Click(chromedp.CSS("#f-apply")), settled)
		one := checkViews(name+" alone", "&"+name+"="+url.QueryEscape(single[name]), "")
		if one.Value == 0 || one.Value >= unfiltered.Value || b.hashParam(name) != single[name] {
			t.Fatalf("%s=%s: %d samples, unfiltered %d; URL %q", name, single[name], one.Value, unfiltered.Value, b.hashParam(name))
		}
	}

	// All four: two of the shop pod's containers.
	set := map[string]string{"container": "cart,istio-proxy", "pod": "cart-7d9f", "namespace": "shop"}
	for name, v := range set {
		setInput("f-"+name, v, false)
	}
	setInput("f-qos", "burstable", true) // which applies the filters
	b.run("wait", settled)
	filters := "&container=cart%2Cistio-proxy&pod=cart-7d9f&namespace=shop&qos=burstable"
	shop := checkViews("the shop pod", filters, "")
	if shop.Value == 0 || shop.Value >= unfiltered.Value {
		t.Fatalf("the shop pod's flame graph has %d samples, the unfiltered %d", shop.Value, unfiltered.Value)
	}
	for name, v := range map[string]string{"container": "cart,istio-proxy", "pod": "cart-7d9f", "namespace": "shop", "qos": "burstable"} {
		if got := b.hashParam(name); got != v {
			t.Errorf("URL %s=%q, want %q", name, got, v)
		}
	}

	// Group by container: one group node per container, their samples
	// adding up to the root's.
	selectGroup := func(g string) {
		setInput("flame-group", g, true)
		b.run("group by "+g, settled)
	}
	selectGroup("container")
	grouped := checkViews("the shop pod by container", filters, "container")
	groupNames := func(n flameNode) []string {
		var names []string
		var sum int64
		for _, c := range n.Children {
			if c.Kind != "group" {
				t.Fatalf("a child of the grouped root: %+v", c)
			}
			names = append(names, c.Name)
			sum += c.Value
		}
		if sum != n.Value {
			t.Fatalf("the groups hold %d samples, the root %d", sum, n.Value)
		}
		slices.Sort(names)
		return names
	}
	if got, want := groupNames(grouped), []string{"shop/cart-7d9f/cart", "shop/cart-7d9f/istio-proxy"}; !slices.Equal(got, want) || grouped.Value != shop.Value {
		t.Fatalf("grouped by container: groups %q (%d samples), want %q (%d)", got, grouped.Value, want, shop.Value)
	}
	if drawn := eval[[]string](t, b.ctx, `window.heatscope.flameNames()`); !slices.Contains(drawn, "shop/cart-7d9f/istio-proxy") {
		t.Fatalf("the flame graph's drawn names lack the istio-proxy group: %q", drawn)
	}
	if b.hashParam("group") != "container" {
		t.Fatalf("URL group=%q", b.hashParam("group"))
	}

	// Clear the container and pod filters, keep namespace (both now) and
	// group by namespace.
	for name, v := range map[string]string{"container": "", "pod": "", "namespace": "shop,batch", "qos": ""} {
		setInput("f-"+name, v, false)
	}
	b.run("apply", chromedp.Click(chromedp.CSS("#f-apply")), settled)
	selectGroup("namespace")
	filters = "&namespace=shop%2Cbatch"
	byNS := checkViews("two namespaces by namespace", filters, "namespace")
	if got := groupNames(byNS); !slices.Equal(got, []string{"batch", "shop"}) {
		t.Fatalf("grouped by namespace: %q", got)
	}
	b.screenshot("ui-group-namespace.png")

	// The URL alone reproduces the view: the inputs, the grouping and what
	// is drawn.
	href := eval[string](t, b.ctx, `location.href`)
	b.run("leave", chromedp.Navigate("about:blank"))
	b.run("reload the URL", chromedp.Navigate(href), settled)
	inputs := eval[map[string]string](t, b.ctx, `Object.fromEntries(['container', 'pod', 'namespace', 'qos', 'flame-group'].map(
		(n) => [n, document.getElementById(n === 'flame-group' ? n : 'f-' + n).value]))`)
	if want := map[string]string{"container": "", "pod": "", "namespace": "shop,batch", "qos": "", "flame-group": "namespace"}; !reflect.DeepEqual(inputs, want) {
		t.Fatalf("after a reload of %s: inputs %v, want %v", href, inputs, want)
	}
	if again := checkViews("reloaded", filters, "namespace"); !reflect.DeepEqual(again, byNS) {
		t.Fatalf("after a reload of %s the flame graph differs", href)
	}
	u, _ := url.Parse(href)
	if !strings.Contains(u.Fragment, "group=namespace") {
		t.Fatalf("URL %s", href)
	}
}
