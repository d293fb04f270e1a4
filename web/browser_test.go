package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// xssName is a function name that would run script if the UI inserted
// names as HTML.
const xssName = `<img src=x onerror=alert(1)>`

// uiPerfScript is the browser tests' capture: 3 s of samples 5 ms apart.
// "hotapp" runs hot_fixture_function all the time; "xssapp", whose leaf
// function is xssName, runs only in the first half of each second, so
// that filtering on the command changes the heatmap.
func uiPerfScript() string {
	var b strings.Builder
	for i := range 600 {
		t := float64(base) + 0.3 + float64(i)*0.005
		frac := t - float64(int64(t))
		comm, pid, fn := "hotapp", 100, "hot_fixture_function"
		if i%2 == 1 && frac < 0.5 {
			comm, pid, fn = "xssapp", 200, xssName
		}
		fmt.Fprintf(&b, "%s %d/%d [%03d] %.6f: 10101010 cpu-clock:\n", comm, pid, pid, i%2, t)
		fmt.Fprintf(&b, "\t    400100 %s (/usr/bin/%s)\n\t    400000 main (/usr/bin/%s)\n\n", fn, comm, comm)
	}
	return b.String()
}

func uiStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Import("fixture", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(uiPerfScript()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestUIStaticFiles checks the page and the files it loads, with their
// types (ES modules must be text/javascript) and no inline script or style.
func TestUIStaticFiles(t *testing.T) {
	fx := newFixture(t, uiStore(t), Options{})
	resp, body := fx.get(t, "/")
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`<script type="module" src="/ui/router.js"></script>`)) ||
		bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte("style=")) {
		t.Fatalf("GET /: %d\n%s", resp.StatusCode, body)
	}
	// Every script and style sheet of the UI, its views under ui/views/
	// included.
	files := map[string]string{}
	err := fs.WalkDir(uiFS, "ui", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ctype, ok := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}[path.Ext(name)]; ok {
			files["/"+name] = ctype
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/ui/router.js", "/ui/state.js", "/ui/util.js", "/ui/views/node.js", "/ui/views/fleet.js", "/ui/style.css"} {
		if files[want] == "" {
			t.Errorf("%s is not among the UI's files %v", want, files)
		}
	}
	for path, ctype := range files {
		resp, body := fx.get(t, path)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ctype || len(body) == 0 {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		wantSecurityHeaders(t, path, resp)
		if bytes.Contains(body, []byte("innerHTML")) || bytes.Contains(body, []byte("insertAdjacentHTML")) {
			t.Errorf("%s inserts HTML", path)
		}
	}
	for _, path := range []string{"/ui/", "/ui/views/", "/ui/index.html", "/ui/nope.js", "/ui/../server.go", "/ui//router.js", "/ui/views//node.js", "/ui/router.js/"} {
		if resp, _ := fx.get(t, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp, _ := fx.do(t, http.MethodPost, "/ui/router.js"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/router.js: %d", resp.StatusCode)
	}
}

// TestBrowserUI drives the UI in headless chromium: the heatmap draws, two
// clicked cells select a range whose flame graph shows the hot function, a
// command filter changes the heatmap, the state survives a reload, a
// function name made of HTML stays text, the pprof link downloads a
// profile of the selection, the per-CPU view draws /api/percpu's answer,
// and compare mode shows /api/diff's differential flame graph.
func TestBrowserUI(t *testing.T) {
	ctx := browsertest.Start(t, 1300, 1400, 90*time.Second)
	fx := newFixture(t, uiStore(t), Options{})

	var dialogs atomic.Int32
	var jsErrors atomic.Value
	jsErrors.Store("")
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			dialogs.Add(1)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		case *runtime.EventExceptionThrown:
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
			jsErrors.Store(jsErrors.Load().(string) + msg + "\n")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v (JavaScript errors: %s)", what, err, jsErrors.Load())
		}
	}
	// settled waits until the page has loaded and no request is under way.
	settled := browsertest.Until(`document.body.dataset.ready === '1' && document.body.dataset.busy === '0'`, 30*time.Second)
	shotDir := t.TempDir()
	if dir := os.Getenv("HEATSCOPE_SCREENSHOT_DIR"); dir != "" {
		shotDir = dir
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(shotDir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	run("open the page", chromedp.Navigate(fx.url+"/"), settled)

	type heatmapJSON struct {
		Start    float64     `json:"start"`
		Columns  []int       `json:"columns"`
		Rows     []float64   `json:"rows"`
		Values   [][]float64 `json:"values"`
		MaxValue float64     `json:"maxvalue"`
	}
	type layout struct {
		X, Y, CellW, CellH, Left, Top float64
		Cols, Rows                    int
	}
	before := eval[heatmapJSON](t, ctx, `window.heatscope.heatmap()`)
	run("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap")))
	layoutJS := `(() => { const c = document.getElementById('heatmap'), r = c.getBoundingClientRect(), d = c.dataset;
			return {X: r.left, Y: r.top, CellW: +d.cellW, CellH: +d.cellH, Left: +d.left, Top: +d.top, Cols: +d.cols, Rows: +d.rows}; })()`
	lay := eval[layout](t, ctx, layoutJS)
	if lay.Cols < 3 || lay.Rows != 50 || len(before.Columns) != lay.Cols || before.MaxValue <= 0 || lay.CellW < 1 || lay.CellH < 1 {
		t.Fatalf("heatmap: layout %+v, data %+v", lay, before)
	}
	checkPerCPU(t, ctx, fx)

	cell := func(c, r int) (float64, float64) {
		return lay.X + lay.Left + (float64(c)+0.5)*lay.CellW, lay.Y + lay.Top + (float64(r)+0.5)*lay.CellH
	}
	// From the bottom cell of second 1 (its first 20 ms) to the top cell of
	// second 2 (its last 20 ms): the whole of seconds 1 and 2.
	x0, y0 := cell(1, lay.Rows-1)
	x1, y1 := cell(2, 0)
	run("click two cells", chromedp.MouseClickXY(x0, y0), chromedp.MouseClickXY(x1, y1), settled)
	selJS := `[window.heatscope.state.selFrom, window.heatscope.state.selTo]`
	sel := eval[[]float64](t, ctx, selJS)
	if len(sel) != 2 || sel[0] != before.Start+1 || sel[1] != before.Start+3 {
		t.Fatalf("selection %v, want [%v %v]", sel, before.Start+1, before.Start+3)
	}
	names := eval[[]string](t, ctx, `window.heatscope.flameNames()`)
	if !slices.Contains(names, "hot_fixture_function") || !slices.Contains(names, xssName) || !slices.Contains(names, "hotapp") {
		t.Fatalf("flame graph frames %q", names)
	}
	topText := eval[string](t, ctx, `document.querySelector('#top tbody').textContent`)
	if !strings.Contains(topText, "hot_fixture_function") || !strings.Contains(topText, xssName) {
		t.Fatalf("top functions: %q", topText)
	}
	screenshot("ui-heatmap.png")

	// The pprof link downloads the selection.
	href := eval[string](t, ctx, `document.getElementById('pprof-link').href`)
	resp, err := http.Get(href)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	prof, err := profile.Parse(bytes.NewReader(raw))
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("pprof %s: %d %v", href, resp.StatusCode, err)
	}
	var hot, total int64
	for _, s := range prof.Sample {
		total += s.Value[0]
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function.Name == "hot_fixture_function" {
					hot += s.Value[0]
				}
			}
		}
	}
	if total != 400 || hot == 0 || hot == total {
		t.Fatalf("pprof %s: %d samples, %d in hot_fixture_function", href, total, hot)
	}

	// A command filter changes the heatmap and the flame graph.
	// The page writes the filter into the URL as it starts the views'
	// requests: wait for that, then for them to finish.
	run("filter on the command", chromedp.SetValue(chromedp.CSS("#f-comm"), "hotapp"), chromedp.Click(chromedp.CSS("#f-apply")),
		browsertest.Until(`new URLSearchParams(location.hash.slice(1)).get('comm') === 'hotapp'`, 30*time.Second), settled)
	after := eval[heatmapJSON](t, ctx, `window.heatscope.heatmap()`)
	names = eval[[]string](t, ctx, `window.heatscope.flameNames()`)
	sum := func(h heatmapJSON) (n float64) {
		for _, col := range h.Values {
			for _, v := range col {
				n += v
			}
		}
		return n
	}
	if sum(before) != 600 || sum(after) != 450 || slices.Contains(names, xssName) || !slices.Contains(names, "hot_fixture_function") {
		t.Fatalf("comm filter: %v samples before, %v after; frames %q", sum(before), sum(after), names)
	}

	// The URL holds the state: a reload shows the same view.
	loc := eval[string](t, ctx, `location.href`)
	run("reload", chromedp.Reload(), settled)
	sel = eval[[]float64](t, ctx, selJS)
	names = eval[[]string](t, ctx, `window.heatscope.flameNames()`)
	comm := eval[string](t, ctx, `document.getElementById('f-comm').value`)
	if !strings.Contains(loc, "comm=hotapp") || !strings.Contains(loc, "sf=") || comm != "hotapp" ||
		len(sel) != 2 || sel[0] != before.Start+1 || sel[1] != before.Start+3 || slices.Contains(names, xssName) {
		t.Fatalf("after reload of %s: comm %q, selection %v, frames %q", loc, comm, sel, names)
	}

	// Escape clears the selection.
	run("escape", chromedp.KeyEvent("\x1b"), settled)
	if cleared := eval[bool](t, ctx, `window.heatscope.state.selFrom === null && !location.hash.includes('sf=')`); !cleared {
		t.Fatalf("Escape left the selection: %v", eval[[]float64](t, ctx, selJS))
	}

	imgs := eval[int](t, ctx, `document.querySelectorAll('img').length`)
	if imgs != 0 || dialogs.Load() != 0 {
		t.Fatalf("the HTML function name ran: %d <img> elements, %d dialogs", imgs, dialogs.Load())
	}

	// Compare mode: select A (second 1), press compare, select B (second
	// 2): the flame graph is /api/diff's.
	run("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap")))
	lay = eval[layout](t, ctx, layoutJS)
	x0, y0 = cell(1, lay.Rows-1)
	x1, y1 = cell(1, 0)
	run("select A", chromedp.MouseClickXY(x0, y0), chromedp.MouseClickXY(x1, y1), settled)
	run("compare", chromedp.Click(chromedp.CSS("#compare")), settled)
	run("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap")))
	lay = eval[layout](t, ctx, layoutJS)
	x0, y0 = cell(2, lay.Rows-1)
	x1, y1 = cell(2, 0)
	run("select B", chromedp.MouseClickXY(x0, y0), chromedp.MouseClickXY(x1, y1), settled)
	type compareState struct {
		SelFrom, SelTo, BFrom, BTo float64
		Compare                    bool
		Hash                       string
	}
	stateJS := `(() => { const s = window.heatscope.state;
			return {SelFrom: s.selFrom, SelTo: s.selTo, BFrom: s.bFrom, BTo: s.bTo, Compare: s.compare, Hash: location.hash}; })()`
	st := eval[compareState](t, ctx, stateJS)
	if !st.Compare || st.SelFrom != before.Start+1 || st.SelTo != before.Start+2 || st.BFrom != before.Start+2 || st.BTo != before.Start+3 ||
		!strings.Contains(st.Hash, "cmp=1") || !strings.Contains(st.Hash, "bf=") {
		t.Fatalf("compare state %+v", st)
	}
	checkDiff := func(what string) {
		t.Helper()
		// The page's figures are CPU nanoseconds, the API's seconds.
		type root struct{ A, B, TotalA, TotalB, SamplesA, SamplesB float64 }
		got := eval[*root](t, ctx, `window.heatscope.diffRoot()`)
		var want diffJSON
		apitest.GetJSON(t, fmt.Sprintf("%s/api/diff?source=fixture&comm=hotapp&from=%s&to=%s&from2=%s&to2=%s", fx.url,
			ftoa(st.SelFrom), ftoa(st.SelTo), ftoa(st.BFrom), ftoa(st.BTo)), &want)
		ns := func(sec float64) float64 { return math.Round(sec * 1e9) }
		if got == nil || want.Root == nil || want.SamplesA != 150 || want.SamplesB != 150 || want.TotalA <= 0 || want.TotalA != want.TotalB ||
			got.A != ns(want.Root.A) || got.B != ns(want.Root.B) || got.A != ns(want.TotalA) || got.B != ns(want.TotalB) ||
			got.TotalA != got.A || got.TotalB != got.B || got.SamplesA != 150 || got.SamplesB != 150 {
			t.Fatalf("%s: diff root %+v, /api/diff %+v", what, got, want)
		}
		names := eval[[]string](t, ctx, `window.heatscope.flameNames()`)
		legend := eval[bool](t, ctx, `!document.getElementById('diff-legend').hidden`)
		if !slices.Contains(names, "hot_fixture_function") || !legend {
			t.Fatalf("%s: differential flame graph frames %q, legend shown %v", what, names, legend)
		}
		// Hovering shows both CPU times, their shares and the changes.
		run("scroll to the flame graph", chromedp.ScrollIntoView(chromedp.CSS("#flame")))
		hot := eval[[]float64](t, ctx, `(() => { const r = document.getElementById('flame').getBoundingClientRect(),
			b = window.heatscope.flameBoxes('hot_fixture_function')[0]; return [r.left + b.x + b.w / 2, r.top + b.y + 8]; })()`)
		run("hover the differential graph", chromedp.MouseEvent(chromedp.MouseMoved, hot[0], hot[1]))
		tip := eval[string](t, ctx, `document.getElementById('tooltip').hidden ? '' : document.getElementById('tooltip').textContent`)
		cpu := formatCPU(want.TotalA) // one stack: every node's time
		if want := fmt.Sprintf("hot_fixture_function\nnative: A %s (100.00%%), B %s (100.00%%) of CPU time\nchange 0 s (self: A %s, B %s, change 0 s)", cpu, cpu, cpu, cpu); tip != want {
			t.Fatalf("%s: tooltip %q, want %q", what, tip, want)
		}
		run("leave the graph", chromedp.MouseEvent(chromedp.MouseMoved, 1, 1))
	}
	checkDiff("compare")
	screenshot("ui-percpu-diff.png")
	run("reload in compare mode", chromedp.Reload(), settled)
	if st2 := eval[compareState](t, ctx, stateJS); st2 != st {
		t.Fatalf("after reload: %+v, want %+v", st2, st)
	}
	checkDiff("compare after reload")

	run("exit compare", chromedp.Click(chromedp.CSS("#compare")), settled)
	st = eval[compareState](t, ctx, stateJS)
	names = eval[[]string](t, ctx, `window.heatscope.flameNames()`)
	if exited := eval[bool](t, ctx, `window.heatscope.diffRoot() === null && document.getElementById('diff-legend').hidden`); !exited ||
		st.Compare || strings.Contains(st.Hash, "cmp=") || st.SelFrom != before.Start+1 || !slices.Contains(names, "hot_fixture_function") {
		t.Fatalf("exit compare: still a diff (%v), state %+v, frames %q", !exited, st, names)
	}
	if e := jsErrors.Load().(string); e != "" {
		t.Fatalf("JavaScript errors: %s", e)
	}
}

// checkPerCPU checks that the per-CPU view holds /api/percpu's answer for
// the heatmap's span and draws it: its busiest cell is dark.
func checkPerCPU(t *testing.T, ctx context.Context, fx *fixture) {
	t.Helper()
	type perCPU struct {
		Start  float64   `json:"start"`
		Step   float64   `json:"step"`
		CPUs   []int     `json:"cpus"`
		Counts [][]int64 `json:"counts"`
	}
	got := eval[perCPU](t, ctx, `window.heatscope.percpu()`)
	span := eval[[]float64](t, ctx, `[window.heatscope.state.from, window.heatscope.state.to]`)
	var want perCPU
	apitest.GetJSON(t, fmt.Sprintf("%s/api/percpu?source=fixture&from=%s&to=%s", fx.url, ftoa(span[0]), ftoa(span[1])), &want)
	var total int64
	for _, row := range want.Counts {
		for _, v := range row {
			total += v
		}
	}
	if !reflect.DeepEqual(got, want) || total != 600 || !slices.Equal(want.CPUs, []int{0, 1}) || want.Step != 0.01 {
		t.Fatalf("per-CPU view %+v, /api/percpu %+v (%d samples)", got, want, total)
	}
	px := eval[[]float64](t, ctx, `(() => { const c = document.getElementById('percpu'), d = c.dataset, dpr = window.devicePixelRatio || 1;
			const data = window.heatscope.percpu();
			let bi = 0, bj = 0, bv = -1;
			data.counts.forEach((row, i) => row.forEach((v, j) => { if (v > bv) { bv = v; bi = i; bj = j; } }));
			const p = c.getContext('2d').getImageData(Math.floor((+d.left + (bj + 0.5) * +d.cellW) * dpr),
				Math.floor((+d.top + (bi + 0.5) * +d.cellH) * dpr), 1, 1).data;
			return [bv, p[0], p[1], p[2], +d.draws, +d.cpus]; })()`)
	if len(px) != 6 || px[0] <= 0 || px[1] < 150 || px[2] > 60 || px[3] > 60 || px[4] < 1 || px[5] != 2 {
		t.Fatalf("per-CPU canvas: busiest cell, colour, draws, CPUs: %v", px)
	}
}

// ftoa formats Unix seconds for a query string.
func ftoa(sec float64) string { return strconv.FormatFloat(sec, 'f', -1, 64) }

// eval evaluates a JavaScript expression in the page and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}
