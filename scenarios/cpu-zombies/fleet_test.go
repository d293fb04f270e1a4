package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// fleetNode is one node of the fleet scenario: its name, zone, and how
// many bursts of cpu-zombies (each followed by a reset) it records; 0 is a
// healthy node that records the machine as it is for a few seconds.
type fleetNode struct {
	name, zone string
	bursts     int
}

// fleetNodes are recorded one after the other on this machine, each under
// its own --node name into its own data directory, shipping to one MinIO
// bucket: two with the zombie pattern and its resets, two healthy.
var fleetNodes = []fleetNode{
	{"zombie-a", "zone-1", 3},
	{"healthy-b", "zone-1", 0},
	{"zombie-c", "zone-2", 2},
	{"healthy-d", "zone-2", 0},
}

// TestFleetScenario extends the scenario into a fleet: four nodes'
// recordings in a real MinIO bucket (two with kubelet-sim's bursts and a
// reset after each, two healthy), one query service over the bucket, and
// a headless Chromium walking from the fleet's events to the culprit on
// the right nodes, asserting what a person sees at each step: the resets
// on the two zombie nodes only, the memcg stats functions among the
// functions that grew before the resets, "5 of 5 ena-reset events, on 2
// of 2 nodes", per node and per event, and one event's node view with the
// two windows compared. It saves the screenshots of docs/walkthrough.md's
// second part (HEATSCOPE_SCREENSHOT_DIR).
func TestFleetScenario(t *testing.T) {
	bpftest.Require(t)
	if _, err := findMemoryHierarchy(); err != nil {
		t.Fatalf("the scenario needs memory cgroups: %v", err)
	}
	m := miniotest.Start(t)
	cfg := m.WriteConfig("fleet")
	dir := t.TempDir()
	heatscope := filepath.Join(dir, "heatscope")
	scenario := filepath.Join(dir, "cpu-zombies")
	for bin, pkg := range map[string]string{heatscope: "../../cmd/heatscope", scenario: "."} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	tag := fmt.Sprintf("fleet %d", time.Now().UnixNano())
	resets := 0
	for _, n := range fleetNodes {
		resets += n.bursts
		recordFleetNode(t, heatscope, scenario, cfg, filepath.Join(dir, n.name), n, tag)
	}

	url := "http://" + freeAddr(t)
	serve := exec.Command(heatscope, "serve", "--objstore-config", cfg, "--listen", strings.TrimPrefix(url, "http://"))
	var serveLog bytes.Buffer
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		serve.Process.Signal(syscall.SIGINT)
		serve.Wait()
		if t.Failed() {
			t.Logf("serve:\n%s", serveLog.String())
		}
	}()
	waitNodes(t, url, len(fleetNodes))

	// The API: the resets are on the zombie nodes only, each ours.
	var evs struct {
		Total int `json:"total"`
		Nodes []struct {
			Name  string
			Count int
		} `json:"nodes"`
		Events []struct{ Text string } `json:"events"`
	}
	getJSONInto(t, url+"/api/fleet/events?kind=ena-reset", &evs)
	if evs.Total != resets || len(evs.Nodes) != 2 || evs.Nodes[0].Name != "zombie-a" || evs.Nodes[0].Count != 3 || evs.Nodes[1].Name != "zombie-c" || evs.Nodes[1].Count != 2 {
		t.Fatalf("ena-reset events: %+v, want %d: 3 on zombie-a, 2 on zombie-c", evs, resets)
	}
	for _, e := range evs.Events {
		if !strings.Contains(e.Text, tag) {
			t.Fatalf("a reset not written by this run: %q (another scenario ran at the same time?)", e.Text)
		}
	}
	walkFleet(t, url, resets)
}

// recordFleetNode records one node under its own name, shipping to the
// bucket, and stops the recorder (which ships its last block).
func recordFleetNode(t *testing.T, heatscope, scenario, cfg, data string, n fleetNode, tag string) {
	t.Helper()
	addr := freeAddr(t)
	rec := exec.Command(heatscope, "record", "--data", data, "--node", n.name, "--node-label", "zone="+n.zone,
		"--objstore-config", cfg, "--listen", addr, "--progress", "0", "--max-cpu", "0")
	var recLog bytes.Buffer
	rec.Stdout, rec.Stderr = &recLog, &recLog
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	waitServing(t, "http://"+addr+"/api/sources")
	if n.bursts > 0 {
		sc := exec.Command(scenario, "-cgroups", "1500", "-interval", "4s", "-burst", "1200ms", "-bursts", fmt.Sprint(n.bursts),
			"-inject-every", "1", "-cpu", fmt.Sprint(pinnedCPU), "-tag", tag+" "+n.name)
		var scErr bytes.Buffer
		sc.Stderr = &scErr
		out, err := sc.Output()
		if err != nil {
			t.Fatalf("%s: scenario: %v\n%s", n.name, err, scErr.String())
		}
		if got := strings.Count(string(out), "\n"); got != n.bursts {
			t.Fatalf("%s: %d bursts reported, want %d:\n%s", n.name, got, n.bursts, out)
		}
	} else {
		time.Sleep(8 * time.Second)
	}
	time.Sleep(time.Second) // the recorder reads its ring every 100 ms, the kernel log as it comes
	rec.Process.Signal(syscall.SIGINT)
	if err := rec.Wait(); err != nil {
		t.Fatalf("%s: record: %v\n%s", n.name, err, recLog.String())
	}
	if !strings.Contains(recLog.String(), "blocks and") || strings.Contains(recLog.String(), "not yet shipped") {
		t.Fatalf("%s: the recorder did not ship everything:\n%s", n.name, recLog.String())
	}
	t.Logf("%s recorded and shipped", n.name)
}

// waitNodes waits until the query service lists n nodes.
func waitNodes(t *testing.T, url string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var nodes []struct{ Name string }
		getJSONInto(t, url+"/api/nodes", &nodes)
		if len(nodes) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the query service lists %v, want %d nodes", nodes, n)
		}
		time.Sleep(time.Second)
	}
}

func getJSONInto(t *testing.T, url string, v any) {
	t.Helper()
	var resp *http.Response
	var err error
	for range 60 { // serve may still be starting
		if resp, err = http.Get(url); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// walkFleet walks the fleet views in headless Chromium as a person would,
// from the fleet's events to the culprit and back to one node.
func walkFleet(t *testing.T, url string, resets int) {
	ctx := browsertest.Start(t, 1300, 1000, 120*time.Second)
	var jsErrors atomic.Value
	jsErrors.Store("")
	chromedp.Listen(ctx, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok {
			jsErrors.Store(jsErrors.Load().(string) + ev.ExceptionDetails.Text + "\n")
		}
	})
	settled := chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1' && document.body.dataset.busy === '0'`,
		chromedp.WithPollingTimeout(60*time.Second))
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v (JavaScript errors: %s)", what, err, jsErrors.Load())
		}
	}
	eval := func(expr string, v any) {
		t.Helper()
		res, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		b, _ := json.Marshal(res)
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
	}
	shotDir := t.TempDir()
	if d := os.Getenv(screenshotEnv); d != "" {
		shotDir = d
	}
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shotDir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", filepath.Join(shotDir, name))
	}

	// 1. The fleet's events: the resets light up the two zombie nodes'
	// rows, the healthy nodes have none.
	do("open the fleet events", chromedp.Navigate(url+"/fleet/events#kind=ena-reset"), settled)
	var byNode []string
	eval(`[...document.querySelectorAll('#fe-nodes tbody tr')].map((tr) => tr.cells[0].textContent + ' ' + tr.cells[1].textContent)`, &byNode)
	var summary string
	eval(`document.getElementById('fe-summary').textContent`, &summary)
	if strings.Join(byNode, ", ") != "zombie-a 3, zombie-c 2" || summary != fmt.Sprintf("%d events on 2 nodes", resets) {
		t.Fatalf("fleet events, kind ena-reset: by node %q, summary %q", byNode, summary)
	}
	shoot("walkthrough-fleet-1-events.png")

	var href string
	// 2. What grew before all the resets: the kind's link, then a 2 s
	// window (the bursts are 4 s apart).
	eval(`document.querySelector('#fe-kinds tbody tr[data-name="ena-reset"] a').href`, &href)
	do("follow the kind's link", chromedp.Navigate(href), settled)
	do("window 2 s", chromedp.SetValue(chromedp.CSS("#pd-window"), "2"), chromedp.Click(chromedp.CSS("#pd-apply")), settled)
	var fns []struct{ Name, Kind, GrewBefore string }
	eval(`window.heatscopeFleetDiff.functions()`, &fns)
	rank := slices.IndexFunc(fns, func(f struct{ Name, Kind, GrewBefore string }) bool { return memcgStats.MatchString(f.Name) })
	if rank < 0 || rank >= maxRank {
		t.Fatalf("no memcg stats function among the first %d functions that grew before the resets: %v", maxRank, fns)
	}
	culprit := fns[rank]
	want := fmt.Sprintf("%d of %d ena-reset events, on 2 of 2 nodes", resets, resets)
	if culprit.GrewBefore != want {
		t.Errorf("%s (rank %d) grew before %q, want %q", culprit.Name, rank+1, culprit.GrewBefore, want)
	}
	t.Logf("the culprit: %s, rank %d, grew before %s", culprit.Name, rank+1, culprit.GrewBefore)
	var names []string
	eval(`window.heatscopeFleetDiff.flameNames()`, &names)
	if !slices.Contains(names, "kubelet-sim") {
		t.Errorf("the differential flame graph has no kubelet-sim: %q", names)
	}
	do("search the flame graph", chromedp.SetValue(chromedp.CSS("#pd-search"), "memory_stat|memcg|mem_cgroup"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('pd-search').dispatchEvent(new Event('input'))`), settled)
	// The flame graph is deep: its wide frames are at its bottom.
	do("scroll to the flame graph's base", chromedp.Evaluate[chromedp.Void](`document.getElementById('pd-flame-box').scrollIntoView({block: 'end'})`))
	shoot("walkthrough-fleet-2-prediff.png")
	do("scroll to the culprit's row", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`document.querySelector('#pd-functions tbody tr[data-name=%q]').scrollIntoView({block: 'center'})`, culprit.Name)))
	shoot("walkthrough-fleet-3-grew.png")

	// 3. The culprit per node and per event: it grew before every reset on
	// both zombie nodes.
	do("click the culprit", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#pd-functions tbody tr[data-name=%q]`, culprit.Name))), settled)
	var perNode, perEvent []string
	eval(`[...document.querySelectorAll('#pd-nodes tbody tr')].map((tr) => tr.dataset.node + ' ' + tr.cells[2].textContent)`, &perNode)
	eval(`[...document.querySelectorAll('#pd-events tbody tr')].map((tr) => tr.dataset.node + ':' + tr.dataset.grew)`, &perEvent)
	if strings.Join(perNode, ", ") != "zombie-a 3 of 3, zombie-c 2 of 2" || len(perEvent) != resets || slices.ContainsFunc(perEvent, func(s string) bool { return strings.HasSuffix(s, ":0") }) {
		t.Errorf("%s per node %q, per event %q: want it grown before every reset", culprit.Name, perNode, perEvent)
	}
	do("scroll to the breakdown", chromedp.ScrollIntoView(chromedp.CSS("#pd-focus")))
	shoot("walkthrough-fleet-4-per-node.png")

	// 4. One event, on its node: zombie-c's first reset, its 2 s against
	// the 2 s before, the memcg stats functions among what grew.
	eval(`[...document.querySelectorAll('#pd-events tbody tr')].find((tr) => tr.dataset.node === 'zombie-c').querySelector('a').href`, &href)
	do("open zombie-c's reset", chromedp.Navigate(href), settled)
	var st struct {
		Node    string
		Compare bool
		Norm    string
	}
	eval(`(() => { const s = window.heatscope.state; return {Node: s.node, Compare: s.compare, Norm: s.norm}; })()`, &st)
	var growers []string
	eval(`window.heatscope.growth()`, &growers)
	// One event of one busy machine: the whole machine's growers hold the
	// other jobs' noise, so the memcg stats functions only need to be
	// among them (the fleet's sum above ranks them).
	if st.Node != "zombie-c" || !st.Compare || st.Norm != "length" || !slices.ContainsFunc(growers, memcgStats.MatchString) {
		t.Errorf("zombie-c's node view: state %+v, growers %q", st, growers)
	}
	do("scroll to the heatmap", chromedp.ScrollIntoView(chromedp.CSS("#heatmap-section")))
	shoot("walkthrough-fleet-5-node.png")
	if e := jsErrors.Load().(string); e != "" {
		t.Fatalf("JavaScript errors: %s", e)
	}
}
