package web

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/store"
)

// uploadDir uploads a node's data directory to bkt as its shipper lays
// it out: its blocks and event segments.
func uploadDir(t *testing.T, bkt *bucket.Bucket, node, dir string) {
	t.Helper()
	miniotest.UploadBlocks(t, bkt, node, dir)
	miniotest.UploadSegments(t, bkt, node, dir)
}

// fleetCell is a cell of the drawn overview: its centre in canvas and
// page coordinates, and the colour it should have.
type fleetCell struct {
	X, Y, PageX, PageY float64
	Colour             [3]int
}

// TestBrowserFleetOverview walks the fleet overview in chromium against a
// query service reading a real MinIO bucket of four nodes: node-a
// saturates one CPU from 10 to 20 s and had a network reset then, node-b
// runs kubelet in mem_cgroup_charge on 40% of both CPUs, node-c runs an
// app on a tenth of one CPU and had two events, node-d runs kubelet
// elsewhere on 20% of one CPU. It checks which rows light up, the sort
// orders, the colour switch and its legend, the filters (kubelet in
// mem_cgroup_* is node-b alone), the empty message, and that a click on a
// cell opens that node's timeline and heatmap at that time.
func TestBrowserFleetOverview(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	reset := func(at time.Duration, text string) events.Event {
		return events.Event{Time: fleetStart + int64(at), Source: "kmsg", Severity: events.Warning, Text: text,
			Labels: map[string]string{"pattern": "ena-reset"}}
	}
	uploadDir(t, bkt, "node-a", recordNode(t, "node-a", "z1", spinner, reset(15*time.Second, "eth0: Device reset")))
	uploadDir(t, bkt, "node-b", recordNode(t, "node-b", "z1", kubeletMemcg))
	uploadDir(t, bkt, "node-c", recordNode(t, "node-c", "z2", app, reset(5*time.Second, "eth1: Device reset"),
		reset(25*time.Second, "eth1: Device reset")))
	uploadDir(t, bkt, "node-d", recordNode(t, "node-d", "z2", func(cpu int, off time.Duration) (string, uint32, bool) {
		if cpu == 0 && off%(100*time.Millisecond) < 20*time.Millisecond {
			return "kubelet", 60, false
		}
		return "", 0, false
	}))
	db, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, "fleet", bucketstore.Options{})}, store.ReaderOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	fleetReady := browsertest.Until(`document.body.dataset.fleetReady === '1'`, 30*time.Second)
	b.run("open the UI", chromedp.Navigate(fx.url+"/"), settled, fleetReady)

	if page := eval[string](t, b.ctx, `document.body.dataset.page || ''`); page != "fleet" || b.visible("main") {
		t.Fatalf("with four nodes the first page is %q (main shown: %v), want the fleet overview", page, b.visible("main"))
	}
	rows := func() []string { return eval[[]string](t, b.ctx, `window.heatscopeFleet.rows()`) }
	// cell returns where a node's column containing off is drawn, and
	// the colour the value it should show maps to.
	cell := func(node string, off time.Duration, share float64) fleetCell {
		t.Helper()
		return eval[fleetCell](t, b.ctx, fmt.Sprintf(`window.heatscopeFleet.cell(%q, %g, %g)`, node, float64(fleetStart+int64(off))/1e9, share))
	}
	lit := func(what, node string, off time.Duration, share float64) {
		t.Helper()
		c := cell(node, off, share)
		if got := b.pixel("fleet-map", c.X, c.Y); got != c.Colour {
			t.Errorf("%s: %s at +%v is drawn %v, want %v (a share of %g)", what, node, off, got, c.Colour, share)
		}
	}
	legend := func() string {
		return eval[string](t, b.ctx, `document.getElementById('fleet-legend-label').textContent`)
	}

	// Rows by peak: the saturated core first, whatever the node averages.
	if got := rows(); !reflect.DeepEqual(got, []string{"node-a", "node-b", "node-d", "node-c"}) {
		t.Errorf("rows by peak %v, want node-a (one CPU 100%%), node-b (40%%), node-d (20%%), node-c (10%%)", got)
	}
	lit("saturated", "node-a", 15*time.Second, 1)
	lit("before the saturation", "node-a", 5*time.Second, 0)
	lit("kubelet", "node-b", 5*time.Second, 0.4)
	lit("app", "node-c", 15*time.Second, 0.1)
	if l := legend(); !strings.Contains(l, "busiest single CPU") || !strings.Contains(l, "100%") {
		t.Errorf("legend %q names no unit", l)
	}
	// Readable rows: node-a's saturated cell is a band of at least 18 px
	// of its colour (10 px looked like a barcode).
	if sat := cell("node-a", 15*time.Second, 1); true {
		band := 0
		for y := sat.Y - 15; y <= sat.Y+15; y++ {
			// 30 px left of the column's middle, where the event mark is
			if b.pixel("fleet-map", sat.X-30, y) == sat.Colour {
				band++
			}
		}
		if band < 18 {
			t.Errorf("node-a's row is %d px of colour, want at least 18 (readable)", band)
		}
	}
	// The legend labels both ends of its scale, with the unit.
	legendEnds := func() [2]string {
		return eval[[2]string](t, b.ctx, `['fleet-legend-lo', 'fleet-legend-hi'].map((id) => { const e = document.getElementById(id); return e ? e.textContent : '(none)'; })`)
	}
	if got := legendEnds(); got != [2]string{"0% busy", "100% busy"} {
		t.Errorf("legend ends %q, want 0%% busy and 100%% busy", got)
	}
	// The newest column, 20 s to the last sample at 29.99 s, is covered
	// in part: listed so, and hatched (white stripes over its colour).
	type partial struct {
		Column  int
		Seconds float64
	}
	if got := eval[[]partial](t, b.ctx, `window.heatscopeFleet.partial('node-b')`); len(got) != 1 || got[0] != (partial{2, 9.99}) {
		t.Errorf("node-b's partial columns %+v, want column 2 covering 9.99 s", got)
	}
	for _, c := range []struct {
		off     time.Duration
		hatched bool
	}{{25 * time.Second, true}, {5 * time.Second, false}} {
		mid, next := cell("node-b", c.off, 0.4), cell("node-b", c.off-10*time.Second, 0.4)
		stripes, plain := 0, 0
		for x := mid.X - (mid.X-next.X)/2 + 2; x < mid.X+(mid.X-next.X)/2-2; x++ {
			for y := mid.Y - 6; y <= mid.Y+6; y += 3 {
				switch px := b.pixel("fleet-map", x, y); {
				case px == mid.Colour:
					plain++
				case px[0] > mid.Colour[0] || px[1] > mid.Colour[1] || px[2] > mid.Colour[2]:
					stripes++
				}
			}
		}
		if hatched := stripes > 0 && plain > 0; hatched != c.hatched {
			t.Errorf("node-b at +%v: %d pixels lighter than its colour, %d of it: hatched %v, want %v", c.off, stripes, plain, hatched, c.hatched)
		}
	}
	b.screenshot("fleet-overview.png")
	// The page reads the compact encoding; read through a DataView (a
	// big-endian machine's path) it gives the same overview.
	same, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(async () => { const m = await import('/ui/views/fleet.js');
		const buf = await (await fetch('/api/fleet/overview?encoding=compact')).arrayBuffer();
		const plain = (o) => JSON.stringify(o, (k, v) => (ArrayBuffer.isView(v) ? Array.from(v) : v));
		const native = plain(m.decodeOverview(buf, true));
		return native === plain(m.decodeOverview(buf, false)) ? native : 'differ'; })()`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.Contains(same, `"name":"node-d"`) || !strings.Contains(same, `"busiestCpu":[`) {
		t.Errorf("the compact overview decoded natively and through a DataView: %v %.300s", err, same)
	}
	if n := eval[int](t, b.ctx, `window.heatscopeFleet.marks('node-c')`); n != 2 {
		t.Errorf("node-c has %d event marks, want 2", n)
	}

	// Sorts.
	sortBy := func(by string) {
		b.run("sort by "+by, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.getElementById('fleet-sort');
			e.value = %q; e.dispatchEvent(new Event('change')); })()`, by)))
	}
	sortBy("events")
	if got := rows(); !reflect.DeepEqual(got, []string{"node-c", "node-a", "node-b", "node-d"}) {
		t.Errorf("rows by event count %v, want node-c (2), node-a (1), then node-b, node-d by name", got)
	}
	sortBy("name")
	if got := rows(); !reflect.DeepEqual(got, []string{"node-a", "node-b", "node-c", "node-d"}) {
		t.Errorf("rows by name %v", got)
	}
	if b.hashParam("sort") != "name" {
		t.Errorf("the sort is not in the URL: %s", eval[string](t, b.ctx, `location.hash`))
	}

	// Total CPU time: node-a's 10 CPU-seconds in the saturated step are
	// the fleet's most; node-b's 8 a step come next.
	b.run("colour by total", chromedp.Evaluate[chromedp.Void](`(() => { const e = document.getElementById('fleet-value');
		e.value = 'total'; e.dispatchEvent(new Event('change')); })()`))
	lit("total, saturated", "node-a", 15*time.Second, 1)
	lit("total, kubelet", "node-b", 5*time.Second, 0.8)
	if l := legend(); !strings.Contains(l, "CPU-seconds") {
		t.Errorf("total legend %q", l)
	}
	if got := legendEnds(); got[0] != "0 CPU-s" || !strings.HasSuffix(got[1], " CPU-s") {
		t.Errorf("total legend ends %q, want 0 CPU-s and the highest cell's CPU-s", got)
	}

	// Filters: kubelet in mem_cgroup_* is one filter, answered by node-b.
	filter := func(kv map[string]string) {
		t.Helper()
		js := `(() => { for (const f of ['node', 'label', 'comm', 'frame', 'container', 'namespace']) document.getElementById('fleet-f-' + f).value = '';`
		for k, v := range kv {
			js += fmt.Sprintf(`document.getElementById('fleet-f-%s').value = %q;`, k, v)
		}
		js += `document.getElementById('fleet-filters').requestSubmit(); })()`
		// The submit starts the load at once (fleetReady '0'), before
		// Evaluate returns.
		b.run(fmt.Sprint("filter ", kv), chromedp.Evaluate[chromedp.Void](js), fleetReady)
	}
	filter(map[string]string{"comm": "kubelet", "frame": "^mem_cgroup_"})
	if got := rows(); !reflect.DeepEqual(got, []string{"node-b"}) {
		t.Errorf("kubelet in mem_cgroup_*: rows %v, want node-b", got)
	}
	if s := eval[string](t, b.ctx, `document.getElementById('fleet-status').textContent`); !strings.Contains(s, "3 nodes without a matching sample") {
		t.Errorf("status %q does not say 3 nodes were left out", s)
	}
	filter(map[string]string{"comm": "kubelet"})
	if got := rows(); !reflect.DeepEqual(got, []string{"node-b", "node-d"}) {
		t.Errorf("kubelet: rows %v, want node-b, node-d", got)
	}
	filter(map[string]string{"label": "zone=z2"})
	if got := rows(); !reflect.DeepEqual(got, []string{"node-c", "node-d"}) {
		t.Errorf("zone=z2: rows %v", got)
	}
	filter(map[string]string{"comm": "nobody"})
	if got, msg := rows(), b.notes("fleet-empty")["fleet-empty"]; len(got) != 0 || !strings.Contains(msg, "No sample of the 4 nodes") {
		t.Errorf("comm=nobody: rows %v, message %q", got, msg)
	}
	filter(map[string]string{"frame": "("})
	if s := eval[string](t, b.ctx, `document.getElementById('fleet-status').textContent`); !strings.Contains(s, "frame") ||
		!eval[bool](t, b.ctx, `document.getElementById('fleet-f-frame').classList.contains('invalid')`) {
		t.Errorf("a bad frame regexp: status %q, field not marked", s)
	}
	filter(map[string]string{})
	b.run("colour by busiest", chromedp.Evaluate[chromedp.Void](`(() => { const e = document.getElementById('fleet-value');
		e.value = 'busiest'; e.dispatchEvent(new Event('change')); })()`))

	// A click on node-a's saturated cell opens node-a's views there.
	c := cell("node-a", 15*time.Second, 1)
	b.run("click node-a's saturated cell", chromedp.MouseClickXY(c.PageX, c.PageY),
		browsertest.Until(`location.hash.includes('node=node-a') && window.heatscope.heatmap() !== null`, 30*time.Second), settled)
	if b.visible("#fleet-section") || !b.visible("main") {
		t.Fatalf("after the click the fleet overview is still shown")
	}
	from, to := b.hashParam("from"), b.hashParam("to")
	if b.hashParam("node") != "node-a" || b.hashParam("source") != "node-a" || from != ftoa(float64(fleetStart)/1e9+10) || to != ftoa(float64(fleetStart)/1e9+20) {
		t.Fatalf("the click opened %s, want node-a from +10 s to +20 s", eval[string](t, b.ctx, `location.hash`))
	}
	q := url.Values{"source": {"node-a"}, "node": {"node-a"}, "from": {from}, "to": {to}, "rows": {b.hashParam("rows")}}
	var drawn, api heatmapData
	drawn = eval[heatmapData](t, b.ctx, `window.heatscope.heatmap()`)
	apitest.GetJSON(t, fx.url+"/api/heatmap?"+q.Encode(), &api)
	if !reflect.DeepEqual(drawn, api) || api.MaxValue == 0 {
		t.Errorf("the heatmap drawn is not node-a's at that time (/api/heatmap?%s, busiest cell %d)", q.Encode(), api.MaxValue)
	}
	if tl := eval[int](t, b.ctx, `window.heatscope.timeline().data.counts.reduce((a, b) => a + b, 0)`); tl == 0 {
		t.Error("the timeline drawn after the click is empty")
	}
	// Back to the overview by its link (the page's flag is still up from
	// the last overview drawn: lower it, so that the wait is for this one).
	b.run("back to the fleet", chromedp.Evaluate[chromedp.Void](`document.body.dataset.fleetReady = '0'`),
		chromedp.Click("#fleet-link"), fleetReady)
	if !b.visible("#fleet-section") || len(rows()) != 4 {
		t.Errorf("the fleet link did not bring the overview back: rows %v", rows())
	}

	// A day's range: the page draws the columns and the step of the
	// ladder the API chose, at most as many as it asked for, and says the
	// step in minutes.
	day := fmt.Sprintf("#fleet&from=%s&to=%s", ftoa(float64(fleetStart)/1e9-23*3600), ftoa(float64(fleetStart)/1e9+3600))
	b.run("a day's range", chromedp.Evaluate[chromedp.Void](`document.body.dataset.fleetReady = '0'`),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, day)), fleetReady)
	type dayDrawn struct {
		Step           float64
		Columns, Asked int
		Status         string
	}
	got := eval[dayDrawn](t, b.ctx, `(() => { const d = window.heatscopeFleet.data(); const c = document.getElementById('fleet-map');
		return {Step: d.step, Columns: d.columns, Asked: Math.floor((Math.max(400, c.parentElement.clientWidth - 2) - 180) / 3),
			Status: document.getElementById('fleet-status').textContent}; })()`)
	if !slices.Contains(overview.Ladder, time.Duration(got.Step*1e9)) || got.Step < 60 || got.Columns > got.Asked ||
		got.Step*float64(got.Columns) < 24*3600 || !strings.Contains(got.Status, fmt.Sprintf("%g min a column", got.Step/60)) {
		t.Errorf("a day in %d columns asked: %d of %g s drawn, status %q; want a step of the ladder, in minutes",
			got.Asked, got.Columns, got.Step, got.Status)
	}
}

// visible reports whether the element matched by sel is displayed.
func (b *browser) visible(sel string) bool {
	b.t.Helper()
	return eval[bool](b.t, b.ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && !e.hidden && getComputedStyle(e).display !== 'none'; })()`, sel))
}
