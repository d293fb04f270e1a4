package web

import (
	"fmt"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// sharedSource is a recording of one node under one source name.
type sharedSource struct {
	node, source string
	from         time.Duration // after synthStart
	seconds      float64
	samples      int
	first, last  int64 // Unix ns
}

// sharedSourceFleet uploads to a real MinIO bucket two nodes whose
// recordings share the source name "vm" (their hostname, as cloned VMs
// have): node-a from 0 to 30 s, node-b from 10 to 50 s; and node-a's
// later recording under its own name, "node-a", from 60 to 90 s (the
// default source once it follows the node). It returns a query service
// over the bucket and the recordings with their samples.
func sharedSourceFleet(t *testing.T) (*fixture, []*sharedSource) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	recs := []*sharedSource{
		{node: "node-a", source: "vm", from: 0, seconds: 30},
		{node: "node-b", source: "vm", from: 10 * time.Second, seconds: 40},
		{node: "node-a", source: "node-a", from: 60 * time.Second, seconds: 30},
	}
	for i, r := range recs {
		dir := t.TempDir()
		db, err := store.Open(dir, store.Options{Source: r.source, Node: r.node, PeriodNs: hostPeriod, BlockDuration: 20 * time.Second,
			Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		g := synth.New(synth.Config{CPUs: 2, Hz: 49, Start: synthStart + int64(r.from), Seconds: r.seconds, Stacks: 50, Seed: uint64(i + 1)})
		var s sample.Sample
		for g.Next(&s) {
			s.Time = s.Time / 1000 * 1000
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			if r.samples == 0 {
				r.first = s.Time
			}
			r.first, r.last = min(r.first, s.Time), max(r.last, s.Time)
			r.samples++
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		// Each recording is its own data directory; node-a's two go to
		// its one bucket directory, as its shipper would put them.
		uploadDir(t, bkt, r.node, dir)
	}
	db, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, "fleet", bucketstore.Options{})}, store.ReaderOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return newFixture(t, db, Options{}), recs
}

// TestNodeViewHoldsThatNodeOnly: over a bucket where node-a and node-b
// both recorded as source "vm", node-a's view lists its own sources with
// its own samples and spans (/api/sources?node=node-a), and its views
// default to its own span of the source: node-a's "vm" is 0 to 30 s, not
// the 0 to 50 s of "vm" on both nodes cut to node-a's whole span (0 to 90 s). Without
// a node, "vm" is both nodes' (the fleet's source list).
func TestNodeViewHoldsThatNodeOnly(t *testing.T) {
	fx, recs := sharedSourceFleet(t)
	aVM, bVM, aOwn := recs[0], recs[1], recs[2]
	type src struct {
		Name    string  `json:"name"`
		First   float64 `json:"first"`
		Last    float64 `json:"last"`
		Samples int     `json:"samples"`
	}
	want := func(rs ...*sharedSource) []src {
		var out []src
		for _, r := range rs {
			out = append(out, src{r.source, float64(r.first) / 1e9, float64(r.last) / 1e9, r.samples})
		}
		return out
	}
	// node-a's views of "vm" default to node-a's span of it.
	var tl struct {
		Start  float64 `json:"start"`
		Step   float64 `json:"step"`
		Counts []int   `json:"counts"`
	}
	apitest.GetJSON(t, fx.url+"/api/timeline?source=vm&node=node-a&step=1s&idle=include", &tl)
	total := 0
	for _, c := range tl.Counts {
		total += c
	}
	end := tl.Start + float64(len(tl.Counts))*tl.Step
	if total != aVM.samples || tl.Start > float64(aVM.first)/1e9 || end > float64(aVM.last)/1e9+1+tl.Step {
		t.Errorf("node-a's vm timeline: %d samples from %.3f to %.3f, want %d from %.3f to %.3f (node-a's span of vm)", total, tl.Start, end,
			aVM.samples, float64(aVM.first)/1e9, float64(aVM.last)/1e9)
	}

	var got []src
	apitest.GetJSON(t, fx.url+"/api/sources?node=node-a", &got)
	if !reflect.DeepEqual(got, want(aOwn, aVM)) {
		t.Errorf("node-a's sources %+v, want %+v (its own samples only)", got, want(aOwn, aVM))
	}
	apitest.GetJSON(t, fx.url+"/api/sources?node=node-b", &got)
	if !reflect.DeepEqual(got, want(bVM)) {
		t.Errorf("node-b's sources %+v, want %+v", got, want(bVM))
	}
	apitest.GetJSON(t, fx.url+"/api/sources", &got)
	both := src{"vm", float64(aVM.first) / 1e9, float64(bVM.last) / 1e9, aVM.samples + bVM.samples}
	if len(got) != 2 || got[1] != both {
		t.Errorf("every source %+v, want node-a then vm of both nodes %+v", got, both)
	}

}

// TestBrowserNodeViewSourceCounts: node-a's view, opened as a click on
// its row of the fleet overview opens it, lists node-a's samples of
// source "vm" in the source picker, not node-a's and node-b's together
// (the "vm (46586 samples)").
func TestBrowserNodeViewSourceCounts(t *testing.T) {
	fx, recs := sharedSourceFleet(t)
	aVM, bVM, aOwn := recs[0], recs[1], recs[2]
	b := newBrowser(t)
	q := url.Values{"source": {"vm"}, "node": {"node-a"}}
	b.run("open node-a's view", chromedp.Navigate(fx.url+"/#"+q.Encode()), settled)
	choices := eval[[][]string](t, b.ctx, `window.heatscope.sourceChoices()`)
	want := [][]string{{"node-a", fmt.Sprintf("node-a (%d samples)", aOwn.samples)}, {"vm", fmt.Sprintf("vm (%d samples)", aVM.samples)}}
	if !reflect.DeepEqual(choices, want) {
		t.Errorf("node-a's source picker %q, want %q (not vm's %d samples of both nodes)", choices, want, aVM.samples+bVM.samples)
	}
	// Picking every node lists the fleet's sources again.
	b.run("pick every node", chromedp.Evaluate[chromedp.Void](`(() => { const e = document.getElementById('f-node');
		e.value = ''; e.dispatchEvent(new Event('change')); })()`), settled)
	choices = eval[[][]string](t, b.ctx, `window.heatscope.sourceChoices()`)
	if len(choices) != 2 || choices[1][1] != fmt.Sprintf("vm (%d samples)", aVM.samples+bVM.samples) {
		t.Errorf("every node's source picker %q, want vm with %d samples", choices, aVM.samples+bVM.samples)
	}
	// Its per-CPU view keeps the nodes' CPUs apart, each row named with
	// its node.
	rows := eval[[]string](t, b.ctx, `(() => { const d = window.heatscope.percpu(); return d.nodes.map((n, i) => n + ' CPU ' + d.cpus[i]); })()`)
	if want := []string{"node-a CPU 0", "node-a CPU 1", "node-b CPU 0", "node-b CPU 1"}; !reflect.DeepEqual(rows, want) {
		t.Errorf("every node's per-CPU rows %q, want %q", rows, want)
	}
	b.screenshot("node-view-sources.png")
}

// TestPerCPUKeepsNodesApart: /api/percpu of source "vm", which node-a and
// node-b both recorded, from 10 to 30 s where both did, has a row per
// node and CPU: CPU 0 of two nodes busy all the time is two rows of 100%,
// not one of 200%.
func TestPerCPUKeepsNodesApart(t *testing.T) {
	fx, recs := sharedSourceFleet(t)
	from := float64(recs[1].first)/1e9 + 1
	var pc struct {
		Step  float64     `json:"step"`
		CPUs  []uint32    `json:"cpus"`
		Nodes []string    `json:"nodes"`
		CPU   [][]float64 `json:"cpu"`
	}
	apitest.GetJSON(t, fmt.Sprintf("%s/api/percpu?source=vm&idle=include&step=1s&from=%.3f&to=%.3f", fx.url, from, from+15), &pc)
	if want := []string{"node-a", "node-a", "node-b", "node-b"}; !reflect.DeepEqual(pc.Nodes, want) || !reflect.DeepEqual(pc.CPUs, []uint32{0, 1, 0, 1}) {
		t.Fatalf("rows: nodes %q, CPUs %v; want %q and CPUs 0, 1, 0, 1", pc.Nodes, pc.CPUs, want)
	}
	for i, row := range pc.CPU {
		for j, sec := range row {
			if sec > pc.Step+1e-9 || sec < 0.9*pc.Step {
				t.Errorf("%s CPU %d step %d: %.6f s of CPU time in %g s, want the whole step (never idle) and no more", pc.Nodes[i], pc.CPUs[i], j, sec, pc.Step)
			}
		}
	}
}
