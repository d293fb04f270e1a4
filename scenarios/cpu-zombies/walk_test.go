package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/browsertest"
)

// screenshotEnv names the directory the walk saves its screenshots in
// (a temporary one by default); docs/walkthrough.md shows those saved with
// HEATSCOPE_SCREENSHOT_DIR=$PWD/docs/screenshots.
const screenshotEnv = "HEATSCOPE_SCREENSHOT_DIR"

// walker drives a headless chromium through the UI for a walk, failing
// the test with the page's JavaScript errors when a step fails, and saves
// its screenshots in HEATSCOPE_SCREENSHOT_DIR (a temporary directory
// without it).
type walker struct {
	t        *testing.T
	ctx      context.Context
	jsErrors atomic.Value // string: the exceptions thrown so far, a line each
	shotDir  string
	// settled waits until the node view has drawn everything it asked for.
	settled chromedp.Action[chromedp.Void]
	wait    time.Duration // a step's longest wait for the page
}

// newWalker starts chromium with a window of width × height CSS pixels;
// each step's wait for the page gives up after wait, the walk after
// timeout.
func newWalker(t *testing.T, width, height int, wait, timeout time.Duration) *walker {
	w := &walker{t: t, ctx: browsertest.Start(t, width, height, timeout), shotDir: t.TempDir(), wait: wait,
		settled: browsertest.Until(`document.body.dataset.ready === '1' && document.body.dataset.busy === '0'`, wait)}
	w.jsErrors.Store("")
	chromedp.Listen(w.ctx, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok {
			w.jsErrors.Store(w.jsErrors.Load().(string) + ev.ExceptionDetails.Text + "\n")
		}
	})
	if d := os.Getenv(screenshotEnv); d != "" {
		w.shotDir = d
	}
	return w
}

// do runs a step's actions.
func (w *walker) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	w.t.Helper()
	if err := chromedp.Do(w.ctx, actions...); err != nil {
		w.t.Fatalf("%s: %v (JavaScript errors: %s)", what, err, w.jsErrors.Load())
	}
}

// urlHas waits until the page's URL hash sets key to value: the UI writes
// it as it starts the requests of what a click asked for, so settled after
// it waits for their answers, not for the view before the click.
func (w *walker) urlHas(key, value string) chromedp.Action[chromedp.Void] {
	return browsertest.Until(fmt.Sprintf(`new URLSearchParams(location.hash.slice(1)).get(%q) === %q`, key, value), w.wait)
}

// eval evaluates a JavaScript expression in the page into v (through
// JSON).
func (w *walker) eval(expr string, v any) {
	w.t.Helper()
	res, err := chromedp.Run(w.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		w.t.Fatalf("evaluate %s: %v", expr, err)
	}
	b, _ := jsonMarshal(res)
	if err := jsonUnmarshal(b, v); err != nil {
		w.t.Fatalf("evaluate %s: %v", expr, err)
	}
}

// shoot saves a screenshot of the window, or of the element sel selects.
func (w *walker) shoot(name string, sel string) {
	w.t.Helper()
	var png []byte
	var err error
	if sel == "" {
		png, err = chromedp.Run(w.ctx, chromedp.CaptureScreenshot())
	} else {
		png, err = chromedp.Run(w.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	}
	if err != nil {
		w.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(w.shotDir, name), png, 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.t.Logf("screenshot: %s", filepath.Join(w.shotDir, name))
}

// done fails the test if the page threw.
func (w *walker) done() {
	w.t.Helper()
	if e := w.jsErrors.Load().(string); e != "" {
		w.t.Fatalf("JavaScript errors: %s", e)
	}
}

// walkUI walks the UI in headless chromium as a user would: the event
// markers, one event's pre-event window against the window before it,
// kubelet-sim in the memcg stats functions, the one busy CPU in the
// per-CPU view, and the pprof download, read by go tool pprof.
func walkUI(t *testing.T, r *scenarioRun) {
	w := newWalker(t, 1300, 900, 30*time.Second, 90*time.Second)
	do, eval, shoot, settled := w.do, w.eval, w.shoot, w.settled

	// 1. The span of the run: the resets are marks on the timeline and
	// lines on the heatmap, and listed.
	from, to := math.Floor(r.from)-2, math.Ceil(r.to)+2
	do("open the UI", chromedp.Navigate(fmt.Sprintf("%s/#from=%.0f&to=%.0f", r.url, from, to)), settled)
	var markers []int
	eval(`[+document.getElementById('timeline').dataset.markers, +document.getElementById('heatmap').dataset.markers,
		window.heatscope.events().filter((e) => e.text.includes('[injected]')).length]`, &markers)
	if len(markers) != 3 || markers[0] < 4 || markers[1] < 4 || markers[2] < 4 {
		t.Fatalf("timeline markers, heatmap markers, listed resets: %v", markers)
	}
	do("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	shoot("walkthrough-1-events.png", "")

	// 2. The window before the third reset (2 s: the scenario's bursts are
	// 4 s apart), against the 2 s before it.
	b := r.bursts[2]
	do("set the window", chromedp.SetValue(chromedp.CSS("#event-window"), "2"))
	do("mark the event", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`[...document.querySelectorAll('#events button.event')].find((b) => b.textContent.includes(%q)).id = 'picked-event'`, b.Line)))
	do("click the event", chromedp.Click(chromedp.CSS("#picked-event")), w.urlHas("cmp", "1"), settled)
	var st struct {
		SelFrom, SelTo, BFrom, BTo float64
		Compare                    bool
	}
	eval(`(() => { const s = window.heatscope.state; return {SelFrom: s.selFrom, SelTo: s.selTo, BFrom: s.bFrom, BTo: s.bTo, Compare: s.compare}; })()`, &st)
	ev := float64(b.Injected) / 1e9
	if !st.Compare || math.Abs(st.SelTo-ev) > 0.05 || math.Abs(st.SelFrom-(st.SelTo-2)) > 1e-3 ||
		math.Abs(st.BTo-st.SelFrom) > 1e-3 || math.Abs(st.BFrom-(st.SelTo-4)) > 1e-3 {
		t.Fatalf("after clicking the event at %.3f: state %+v", ev, st)
	}
	var growers []string
	eval(`window.heatscope.growth()`, &growers)
	if !slices.ContainsFunc(growers[:min(maxRankMachine, len(growers))], memcgStats.MatchString) {
		t.Errorf("the machine-wide growers after clicking the event lack a memcg stats function in their first %d: %q", maxRankMachine, growers)
	}
	do("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap-section")))
	shoot("walkthrough-2-pre-event.png", "")

	// 3. Only kubelet-sim: its kernel time in the memcg stats functions.
	do("filter kubelet-sim", chromedp.SetValue(chromedp.CSS("#f-comm"), "kubelet-sim"),
		chromedp.Click(chromedp.CSS("#f-apply")), w.urlHas("comm", "kubelet-sim"), settled)
	var names []string
	eval(`window.heatscope.flameNames()`, &names)
	eval(`window.heatscope.growth()`, &growers)
	if !slices.Contains(names, "kubelet-sim") || !slices.ContainsFunc(names, memcgStats.MatchString) ||
		!slices.ContainsFunc(growers[:min(maxRank, len(growers))], memcgStats.MatchString) {
		t.Fatalf("kubelet-sim's pre-event flame graph %q, growers %q: no memcg stats function (among the first %d growers)", names, growers, maxRank)
	}
	// The two windows are equally long, so the differential flame graph
	// scales B by length (weight 1, but for the microseconds the windows'
	// ends are rounded to): every node's change is A - B, within a
	// nanosecond of CPU time, and the memcg stats functions are red (grew).
	var diff struct {
		Norm      string
		N, Uneven int
		Memcg     []float64
	}
	eval(fmt.Sprintf(`(() => { const t = window.heatscope.flameTree(); const re = new RegExp(%q);
		let uneven = 0; const memcg = [];
		const s = window.heatscope.state, us = (x) => Math.round(x * 1e6);
		const w = (us(s.selTo) - us(s.selFrom)) / (us(s.bTo) - us(s.bFrom));
		for (let i = 0; i < t.n; i++) {
			if (Math.abs(t.deltaTotal[i] - (t.a[i] - t.b[i] * w)) > 1) uneven++;
			if (re.test(t.names[t.name[i]])) memcg.push(t.deltaTotal[i]);
		}
		return {Norm: window.heatscope.state.norm, N: t.n, Uneven: uneven, Memcg: memcg}; })()`, memcgStats.String()), &diff)
	if diff.Norm != "length" || diff.N == 0 || diff.Uneven != 0 || len(diff.Memcg) == 0 || slices.Max(diff.Memcg) <= 0 {
		t.Errorf("pre-event differential flame graph: %+v; want B scaled by length (every change A - B) and a memcg stats function that grew", diff)
	}
	do("search the flame graph", chromedp.SetValue(chromedp.CSS("#flame-search"), "memory_stat|memcg|mem_cgroup"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('flame-search').dispatchEvent(new Event('input'))`), settled)
	do("scroll to the flame graph", chromedp.ScrollIntoView(chromedp.CSS("#flame-section")))
	shoot("walkthrough-3-kubelet-sim.png", "#flame-section")

	// 4. The per-CPU view: kubelet-sim on CPU 1 only.
	var pc perCPU
	eval(`window.heatscope.percpu()`, &pc)
	total, pinned := pc.onPinned()
	if total == 0 || pinned != total {
		t.Fatalf("per-CPU view: %d of %d samples on CPU %d", pinned, total, pinnedCPU)
	}
	do("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap-section")))
	shoot("walkthrough-4-percpu.png", "")
	do("scroll to the growers", chromedp.ScrollIntoView(chromedp.CSS("#growth-box")))
	shoot("walkthrough-5-growth.png", "#growth-box")

	// 5. The pprof download of the selection, read by go tool pprof.
	var href string
	eval(`document.getElementById('pprof-link').href`, &href)
	resp, err := http.Get(href)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(href, "comm=kubelet-sim") {
		t.Fatalf("pprof %s: %d", href, resp.StatusCode)
	}
	file := filepath.Join(t.TempDir(), "kubelet-sim.pb.gz")
	os.WriteFile(file, raw, 0o644)
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=40", file).CombinedOutput()
	if err != nil || !memcgInText(string(out)) {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	t.Logf("go tool pprof -top -cum of the download:\n%s", out)
	w.done()
}

func memcgInText(s string) bool {
	for _, f := range strings.Fields(s) {
		if memcgStats.MatchString(f) {
			return true
		}
	}
	return false
}
