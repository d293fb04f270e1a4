package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/sharecheck"
)

// fleetNode is one node of the fleet scenario: its name, zone, and how
// many bursts of cpu-zombies (each followed by a reset) it records; 0 is a
// healthy node that records the machine as it is for a few seconds.
type fleetNode struct {
	name, zone string
	bursts     int
	// cloned: while it records, a second recorder with a data directory
	// of its own starts under its name (a cloned VM keeps its hostname)
	// and must be refused.
	cloned bool
}

// fleetNodes are recorded one after the other on this machine, each under
// its own --node name into its own data directory, shipping to one MinIO
// bucket: two with the zombie pattern and its resets, two healthy.
var fleetNodes = []fleetNode{
	{"zombie-a", "zone-1", 3, false},
	{"healthy-b", "zone-1", 0, true},
	{"zombie-c", "zone-2", 2, false},
	{"healthy-d", "zone-2", 0, false},
}

// TestFleetScenario extends the scenario into a fleet: four nodes'
// recordings in a real MinIO bucket (two with kubelet-sim's bursts and a
// reset after each, two healthy), one query service over the bucket, and
// a headless Chromium walking from the fleet overview (the first page) to
// the fleet's events and to the culprit on the right nodes, asserting
// what a person sees at each step: a row per node, the resets as marks on
// the two zombie nodes' rows only, those two rows alone left by a filter
// on kubelet-sim in the memcg stats functions, lit on the CPU it was
// pinned to; the resets on the two zombie nodes only in the event list;
// the overview's cells at most 1 and agreeing with /api/percpu on every
// node (checkOverviewShares); the memcg stats functions among the
// functions that grew before the
// resets, "5 of 5 ena-reset events, on 2 of 2 nodes", per node and per
// event; and one event's node view with the two windows compared. It saves
// the screenshots of docs/walkthrough.md's second part
// (HEATSCOPE_SCREENSHOT_DIR).
func TestFleetScenario(t *testing.T) {
	dir, heatscope, scenario := buildScenario(t)
	m := miniotest.Start(t)
	cfg := m.WriteConfig("fleet")
	tag := fmt.Sprintf("fleet %d", time.Now().UnixNano())
	resets := 0
	for _, n := range fleetNodes {
		resets += n.bursts
		recordFleetNode(t, heatscope, scenario, cfg, filepath.Join(dir, n.name), n, tag)
	}

	url := "http://" + freeAddr(t)
	startLogged(t, "serve", exec.Command(heatscope, "serve", "--objstore-config", cfg, "--listen", strings.TrimPrefix(url, "http://")))
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
	checkOverviewShares(t, url)
	walkFleet(t, url, resets)
	renameNode(t, heatscope, cfg, m, url, filepath.Join(dir, "healthy-d"))
}

// checkOverviewShares runs the overview's property test on every node of
// the fleet, real recordings with the overhead guard on: at steps of 1, 7,
// 10, 13 and 20 s from a start off every step, no cell is above 1 and
// every cell agrees with /api/percpu for its node (sharecheck.Shares).
func checkOverviewShares(t *testing.T, base string) {
	var nodes []struct {
		Name        string
		First, Last float64
	}
	getJSONInto(t, base+"/api/nodes", &nodes)
	for _, n := range nodes {
		// the longest period the node recorded at (the guard may have
		// lowered the rate)
		var sources []struct {
			PeriodNs int64 `json:"periodNs"`
		}
		getJSONInto(t, base+"/api/sources?node="+n.Name, &sources)
		period := time.Second / 99
		for _, s := range sources {
			period = max(period, time.Duration(s.PeriodNs))
		}
		from, to := time.UnixMilli(int64(n.First*1e3)-300), time.UnixMilli(int64(n.Last*1e3)+500)
		highest := sharecheck.Shares(t, base, n.Name, from, to, period, nil)
		t.Logf("%s: overview cells checked from %s to %s, highest busiest share %.4f", n.Name, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), highest)
	}
}

// renameNode starts healthy-d's data directory again as healthy-d2 for a
// few seconds: healthy-d2 holds only what was recorded under its name,
// and healthy-d's samples are neither doubled nor moved.
func renameNode(t *testing.T, heatscope, cfg string, m *miniotest.Server, url, data string) {
	t.Helper()
	type node struct {
		Name        string
		Samples     int
		First, Last float64
	}
	nodes := func() map[string]node {
		var list []node
		getJSONInto(t, url+"/api/nodes", &list)
		out := map[string]node{}
		for _, n := range list {
			out[n.Name] = n
		}
		return out
	}
	before := nodes()["healthy-d"]
	out, err := exec.Command(heatscope, "record", "--data", data, "--node", "healthy-d2", "--objstore-config", cfg,
		"--duration", "5s", "--listen", "", "--progress", "0", "--max-cpu", "0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "renamed") {
		t.Fatalf("healthy-d restarted as healthy-d2: %v; want it recorded, warning of the rename:\n%s", err, out)
	}
	waitNodes(t, url, len(fleetNodes)+1)
	after := nodes()
	if after["healthy-d"].Samples != before.Samples {
		t.Errorf("healthy-d holds %d samples after the rename, %d before", after["healthy-d"].Samples, before.Samples)
	}
	d2 := after["healthy-d2"]
	if d2.Samples == 0 || d2.First <= before.Last || d2.Samples >= before.Samples {
		t.Errorf("healthy-d2: %+v; want only the 5 s recorded under its name, after healthy-d's last sample (%v, %d samples)", d2, before.Last, before.Samples)
	}
	// A block shipped again under the new name keeps its id: no id may be
	// under both.
	old := map[string]bool{}
	for _, o := range m.Objects("fleet/healthy-d/blocks/") {
		old[strings.TrimPrefix(o, "fleet/healthy-d/")] = true
	}
	objs := m.Objects("fleet/healthy-d2/blocks/")
	for _, o := range objs {
		if old[strings.TrimPrefix(o, "fleet/healthy-d2/")] {
			t.Errorf("%s was shipped under healthy-d before the rename", o)
		}
	}
	if len(objs) == 0 {
		t.Error("nothing under healthy-d2")
	}
}

// recordFleetNode records one node under its own name, shipping to the
// bucket, and stops the recorder (which ships its last block).
func recordFleetNode(t *testing.T, heatscope, scenario, cfg, data string, n fleetNode, tag string) {
	t.Helper()
	addr := freeAddr(t)
	recLog, stop := startLogged(t, n.name+"'s recorder", exec.Command(heatscope, "record", "--data", data, "--node", n.name,
		"--node-label", "zone="+n.zone, "--objstore-config", cfg, "--listen", addr, "--progress", "0", "--max-cpu", "0"))
	waitServing(t, "http://"+addr+"/api/sources")
	if n.bursts > 0 {
		runBursts(t, scenario, tag+" "+n.name, n.bursts)
	} else {
		time.Sleep(8 * time.Second)
	}
	if n.cloned {
		out, err := exec.Command(heatscope, "record", "--data", data+"-clone", "--node", n.name, "--objstore-config", cfg,
			"--duration", "5s", "--listen", "", "--progress", "0").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "node "+n.name+" is being recorded by another heatscope") || !strings.Contains(string(out), "--node NAME") {
			t.Fatalf("a second recorder under %s's name: %v; want it refused, naming the first and --node:\n%s", n.name, err, out)
		}
		t.Logf("a second recorder under %s's name was refused", n.name)
	}
	time.Sleep(time.Second) // the recorder reads its ring every 100 ms, the kernel log as it comes
	if err := stop(); err != nil {
		t.Fatalf("%s: record: %v", n.name, err)
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

// walkFleet walks the fleet views in headless Chromium as a person would:
// from the fleet overview, heatscope's first page over several nodes, to
// the fleet's events, to what grew before the resets, and back to one
// node.
func walkFleet(t *testing.T, url string, resets int) {
	w := newWalker(t, 1300, 1000, 60*time.Second, 150*time.Second)
	do, eval, shoot, settled := w.do, w.eval, w.shoot, w.settled
	overviewDrawn := browsertest.Until(`document.body.dataset.fleetReady === '1'`, 60*time.Second)
	// follow clicks a link to another page and waits until that page has
	// drawn what it asked for.
	follow := func(what, sel string) {
		t.Helper()
		switch resp, err := chromedp.RunResponse(w.ctx, chromedp.Click(chromedp.CSS(sel))); {
		case err != nil:
			t.Fatalf("%s: %v (JavaScript errors: %s)", what, err, w.jsErrors.Load())
		case resp == nil:
			t.Fatalf("%s: the click loaded no page (JavaScript errors: %s)", what, w.jsErrors.Load())
		case resp.Status != 200:
			t.Fatalf("%s: HTTP %d %s (JavaScript errors: %s)", what, resp.Status, resp.StatusText, w.jsErrors.Load())
		}
		do(what, settled)
	}
	type row struct {
		Name       string
		Resets     int
		Peak       float64
		BusiestCPU int
	}
	rows := func() []row {
		t.Helper()
		var out []row
		eval(`(() => { const d = window.heatscopeFleet.data(); return window.heatscopeFleet.rows().map((name) => {
			const n = d.nodes.find((n) => n.name === name);
			return {Name: name, Resets: n.events.filter((e) => e.kind === 'ena-reset').length, Peak: n.peak,
				BusiestCPU: n.peakColumn < 0 ? -1 : n.busiestCpu[n.peakColumn]}; }); })()`, &out)
		return out
	}

	// 1. heatscope's first page over a fleet is the fleet overview: a row
	// per node, the busiest CPU's busy share per column; the resets are
	// marks on the two zombie nodes' rows, none on the healthy ones'.
	do("open heatscope", chromedp.Navigate(url+"/"), overviewDrawn)
	var page string
	eval(`document.body.dataset.page || ''`, &page)
	all := rows()
	resetsOn := map[string]int{}
	for _, r := range all {
		resetsOn[r.Name] = r.Resets
	}
	if page != "fleet" || len(all) != len(fleetNodes) || resetsOn["zombie-a"] != 3 || resetsOn["zombie-c"] != 2 ||
		resetsOn["healthy-b"] != 0 || resetsOn["healthy-d"] != 0 {
		t.Fatalf("the first page: %q, rows %+v; want the fleet overview, 4 rows, resets 3 on zombie-a and 2 on zombie-c only", page, all)
	}
	shoot("walkthrough-fleet-1-overview.png", "")

	// 2. Which nodes ran kubelet-sim in the memcg stats functions: a
	// command and a frame filter leave the two zombie nodes, lit on the
	// CPU kubelet-sim was pinned to, and say the two others are hidden.
	do("filter the overview", chromedp.SetValue(chromedp.CSS("#fleet-f-comm"), "kubelet-sim"),
		chromedp.SetValue(chromedp.CSS("#fleet-f-frame"), memcgStats.String()),
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.fleetReady = '0'`), chromedp.Click(chromedp.CSS("#fleet-apply")), overviewDrawn)
	filtered := rows()
	var status string
	eval(`document.getElementById('fleet-status').textContent`, &status)
	litNodes := []string{}
	for _, r := range filtered {
		litNodes = append(litNodes, r.Name)
		if r.Peak <= 0 || r.BusiestCPU != pinnedCPU {
			t.Errorf("%s, filtered to kubelet-sim in the memcg stats functions: peak %.3f on CPU %d, want lit on CPU %d", r.Name, r.Peak, r.BusiestCPU, pinnedCPU)
		}
	}
	slices.Sort(litNodes)
	if strings.Join(litNodes, ",") != "zombie-a,zombie-c" || !strings.Contains(status, "2 nodes without a matching sample are not shown") {
		t.Fatalf("the overview filtered to kubelet-sim in the memcg stats functions: rows %+v, status %q; want zombie-a and zombie-c, 2 hidden", filtered, status)
	}
	shoot("walkthrough-fleet-2-overview-filtered.png", "")

	// 3. The fleet's events (the link at the top), then the resets alone
	// (a click on their kind): 3 on zombie-a, 2 on zombie-c.
	follow("follow the fleet events link", `.fleet-nav a[href="/fleet/events"]`)
	do("pick the resets", chromedp.Click(chromedp.CSS(`#fe-kinds tbody tr[data-name="ena-reset"] td`)), w.urlHas("kind", "ena-reset"), settled)
	var byNode []string
	eval(`[...document.querySelectorAll('#fe-nodes tbody tr')].map((tr) => tr.cells[0].textContent + ' ' + tr.cells[1].textContent)`, &byNode)
	var summary, kind string
	eval(`document.getElementById('fe-summary').textContent`, &summary)
	eval(`document.getElementById('fe-kind').value`, &kind)
	if kind != "ena-reset" || strings.Join(byNode, ", ") != "zombie-a 3, zombie-c 2" || summary != fmt.Sprintf("%d events on 2 nodes", resets) {
		t.Fatalf("fleet events, kind %q: by node %q, summary %q", kind, byNode, summary)
	}
	shoot("walkthrough-fleet-3-events.png", "")

	// 4. What grew before all the resets: the kind's link, then a 2 s
	// window (the bursts are 4 s apart).
	follow("follow the kind's link", `#fe-kinds tbody tr[data-name="ena-reset"] a`)
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
	shoot("walkthrough-fleet-4-prediff.png", "")
	do("scroll to the culprit's row", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`document.querySelector('#pd-functions tbody tr[data-name=%q]').scrollIntoView({block: 'center'})`, culprit.Name)))
	shoot("walkthrough-fleet-5-grew.png", "")

	// 5. The culprit per node and per event: it grew before every reset on
	// both zombie nodes.
	do("click the culprit", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#pd-functions tbody tr[data-name=%q]`, culprit.Name))), settled)
	var perNode, perEvent []string
	eval(`[...document.querySelectorAll('#pd-nodes tbody tr')].map((tr) => tr.dataset.node + ' ' + tr.cells[2].textContent)`, &perNode)
	eval(`[...document.querySelectorAll('#pd-events tbody tr')].map((tr) => tr.dataset.node + ':' + tr.dataset.grew)`, &perEvent)
	if strings.Join(perNode, ", ") != "zombie-a 3 of 3, zombie-c 2 of 2" || len(perEvent) != resets || slices.ContainsFunc(perEvent, func(s string) bool { return strings.HasSuffix(s, ":0") }) {
		t.Errorf("%s per node %q, per event %q: want it grown before every reset", culprit.Name, perNode, perEvent)
	}
	do("scroll to the breakdown", chromedp.ScrollIntoView(chromedp.CSS("#pd-focus")))
	shoot("walkthrough-fleet-6-per-node.png", "")

	// 6. One event, on its node: zombie-c's first reset, its 2 s against
	// the 2 s before, the memcg stats functions among what grew.
	do("mark zombie-c's first reset", chromedp.Evaluate[chromedp.Void](
		`[...document.querySelectorAll('#pd-events tbody tr')].find((tr) => tr.dataset.node === 'zombie-c').querySelector('a').id = 'walked-event'`))
	follow("open zombie-c's reset", "#walked-event")
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
	shoot("walkthrough-fleet-7-node.png", "")
	w.done()
}
