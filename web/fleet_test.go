package web

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// fleetStart is the overview fixture's first sample: a whole 10 s.
const fleetStart = base / 10 * 10 * int64(time.Second)

// busyFn says which thread (comm, tid; "" for the idle task) runs on a CPU
// at a time offset, and whether it is in mem_cgroup_charge.
type busyFn func(cpu int, off time.Duration) (comm string, tid uint32, memcg bool)

// recordNode records 30 s of 2 CPUs at 100 Hz into a new data directory
// as node, what runs given by busy, and closes it; events are appended to
// its event log.
func recordNode(t *testing.T, node, zone string, busy busyFn, evs ...events.Event) string {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Source: node, Node: node, NodeLabels: map[string]string{"zone": zone},
		PeriodNs: int64(10 * time.Millisecond), BlockDuration: 20 * time.Second, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	idle := []sample.Frame{{Function: "default_idle", Module: "[kernel.kallsyms]", Kind: sample.KindKernel}}
	for off := time.Duration(0); off < 30*time.Second; off += 10 * time.Millisecond {
		for cpu := range 2 {
			s := sample.Sample{Time: fleetStart + int64(off), CPU: uint32(cpu), Comm: "swapper/0", Stack: idle}
			if comm, tid, memcg := busy(cpu, off); comm != "" {
				s = sample.Sample{Time: s.Time, CPU: s.CPU, PID: tid, TID: tid, Comm: comm, Stack: []sample.Frame{
					{Function: comm + "_work", Module: "/bin/" + comm, Kind: sample.KindUser},
					{Function: "mem_cgroup_charge", Module: "[kernel.kallsyms]", Kind: sample.KindKernel}}}
				if !memcg {
					s.Stack = s.Stack[:1]
				}
			}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, e := range evs {
		if err := db.AppendEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// overviewFleet is three nodes: node-a saturates CPU 0 from 10 to 20 s
// (a "spinner") and has a network reset at 15 s; node-b runs kubelet 40%
// of every CPU, partly in mem_cgroup_charge; node-c runs "app" on CPU 1 a
// tenth of the time. node-a is opened as the query service's own data
// directory (its events are local), the others as block sources.
func overviewFleet(t *testing.T) *store.DB {
	t.Helper()
	a := recordNode(t, "node-a", "z1", spinner, events.Event{Time: fleetStart + int64(15*time.Second), Source: "kmsg", Severity: events.Warning,
		Text: "ena 0000:00:05.0 eth0: Device reset", Labels: map[string]string{"pattern": "ena-reset"}})
	b := recordNode(t, "node-b", "z1", kubeletMemcg)
	c := recordNode(t, "node-c", "z2", app)
	db, err := store.Open(a, store.Options{ReadOnly: true, Node: "node-a", Source: "node-a",
		BlockSources: []store.BlockSource{store.DirSource(b), store.DirSource(c)}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// spinner saturates CPU 0 from 10 to 20 s.
func spinner(cpu int, off time.Duration) (string, uint32, bool) {
	if cpu == 0 && off >= 10*time.Second && off < 20*time.Second {
		return "spinner", 42, false
	}
	return "", 0, false
}

// kubeletMemcg runs kubelet in mem_cgroup_charge 40% of every CPU.
func kubeletMemcg(cpu int, off time.Duration) (string, uint32, bool) {
	if off%(100*time.Millisecond) < 40*time.Millisecond {
		return "kubelet", uint32(50 + cpu), true
	}
	return "", 0, false
}

// app runs on CPU 1 a tenth of the time.
func app(cpu int, off time.Duration) (string, uint32, bool) {
	if cpu == 1 && off%(100*time.Millisecond) < 10*time.Millisecond {
		return "app", 77, false
	}
	return "", 0, false
}

func getOverview(t *testing.T, fx *fixture, query string) overview.Overview {
	t.Helper()
	resp, body := fx.get(t, fleetPath+"?"+query)
	mustOK(t, query, resp, body)
	var ov overview.Overview
	if err := json.Unmarshal(body, &ov); err != nil {
		t.Fatal(err)
	}
	if ov.Nodes == nil || !strings.Contains(string(body), `"nodes":[`) {
		t.Fatalf("%s: nodes is not a list: %s", query, body)
	}
	return ov
}

func names(ov overview.Overview) string {
	var n []string
	for _, r := range ov.Nodes {
		n = append(n, r.Name)
	}
	return strings.Join(n, ",")
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestFleetOverview: rows light up where a node's busiest CPU was busy
// (its CPU time over the step), events mark their node's row, and node
// and sample filters choose the rows.
func TestFleetOverview(t *testing.T) {
	fx := newFixture(t, overviewFleet(t), Options{})
	from := float64(fleetStart) / 1e9
	q := "from=" + ftoa(from) + "&to=" + ftoa(from+30) + "&step=10s"

	ov := getOverview(t, fx, q)
	if names(ov) != "node-a,node-b,node-c" || ov.Columns != 3 || ov.Step != 10 || ov.Start != from ||
		ov.BusiestUnit != overview.UnitBusiest || ov.TotalUnit != overview.UnitTotal || ov.Message != "" {
		t.Fatalf("overview %+v", ov)
	}
	a, b, c := ov.Nodes[0], ov.Nodes[1], ov.Nodes[2]
	// node-a: CPU 0 busy all of the middle step, nothing else.
	if !approx(a.Busiest[0], 0) || !approx(a.Busiest[1], 1) || !approx(a.Busiest[2], 0) || a.BusiestCPU[1] != 0 ||
		a.Peak != 1 || a.PeakColumn != 1 || !approx(a.CPU[1], 10) || a.Labels["zone"] != "z1" {
		t.Errorf("node-a %+v", a)
	}
	if a.EventCount != 1 || len(a.Events) != 1 || a.Events[0].Kind != "ena-reset" || a.Events[0].Column != 1 ||
		!approx(a.Events[0].Time, from+15) || !strings.Contains(a.Events[0].Text, "Device reset") {
		t.Errorf("node-a's events %+v", a.Events)
	}
	// node-b: both CPUs 40% busy: busiest 0.4, total 8 CPU-seconds a
	// step. The last column ends at the nodes' last sample, 29.99 s: its
	// share is over 9.99 s, within a sample's 10 ms of 0.4 (the 10 s
	// summaries give each sample whole to its 10 s).
	for _, n := range ov.Nodes {
		if len(n.Partial) != 1 || n.Partial[0] != (overview.Partial{Column: 2, Seconds: 9.99}) {
			t.Errorf("%s: partial columns %+v, want column 2 covering 9.99 s", n.Name, n.Partial)
		}
	}
	within := func(got, want float64) bool { return math.Abs(got-want) <= 0.01/9.99+1e-4 }
	for s := range 3 {
		if !within(b.Busiest[s], 0.4) || !approx(b.CPU[s], 8) || b.EventCount != 0 || len(b.Events) != 0 {
			t.Errorf("node-b step %d: %+v", s, b)
		}
		if !within(c.Busiest[s], 0.1) || c.BusiestCPU[s] != 1 {
			t.Errorf("node-c step %d: %+v", s, c)
		}
	}

	// "Nodes where kubelet was in mem_cgroup_*" is one filter.
	ov = getOverview(t, fx, q+"&comm=kubelet&frame="+url.QueryEscape("^mem_cgroup_"))
	if names(ov) != "node-b" || ov.Hidden != 2 || !approx(ov.Nodes[0].Busiest[0], 0.4) {
		t.Errorf("kubelet in mem_cgroup_*: %s, hidden %d: %+v", names(ov), ov.Hidden, ov.Nodes)
	}
	// A frame only node-a's spinner runs, scanned: its samples from 10 s
	// to 19.99 s stand for the CPU time from 9.99 s to 19.99 s.
	if ov = getOverview(t, fx, q+"&frame=spinner_work"); names(ov) != "node-a" || !approx(ov.Nodes[0].Busiest[1], 0.999) ||
		!approx(ov.Nodes[0].Busiest[0], 0.001) {
		t.Errorf("frame spinner_work: %s %+v", names(ov), ov.Nodes)
	}
	// Node label.
	if ov = getOverview(t, fx, q+"&label=zone=z1"); names(ov) != "node-a,node-b" {
		t.Errorf("label zone=z1: %s", names(ov))
	}
	// Default range and columns: the whole span, in 10 s multiples.
	if ov = getOverview(t, fx, ""); names(ov) != "node-a,node-b,node-c" || ov.Step != 10 || ov.Columns < 3 || ov.Columns > 4 {
		t.Errorf("defaults: %s, step %g, %d columns", names(ov), ov.Step, ov.Columns)
	}

	// Empty cases: a clear message, never an error.
	for query, want := range map[string]string{
		q + "&comm=nobody":                                   "No sample of the 3 nodes",
		q + "&label=zone=mars":                               "None of the 3 nodes matches the node filter",
		"label=zone=mars":                                    "None of the 3 nodes matches the node filter",
		q + "&node=" + url.QueryEscape("~^x"):                "None of the 3 nodes matches",
		"from=" + ftoa(from-3600) + "&to=" + ftoa(from-3000): "No node has samples or events",
	} {
		ov := getOverview(t, fx, query)
		if len(ov.Nodes) != 0 || !strings.Contains(ov.Message, want) {
			t.Errorf("%s: %d nodes, message %q, want %q", query, len(ov.Nodes), ov.Message, want)
		}
	}

	// Bad parameters: 400 naming the parameter.
	for query, param := range map[string]string{
		q + "&columns=5": "columns",
		"columns=0":      "columns",
		"columns=99999":  "columns",
		"step=500ms":     "step",
		"step=1s&from=" + ftoa(from) + "&to=" + ftoa(from+86400): "step",
		"step=nope":                      "step",
		"from=0&to=4611686017&columns=1": "from", // aligning to a 53 000-day step overflowed: a 500
		"from=0&to=" + ftoa(from):        "from",
		q + "&frame=(":                   "frame",
		q + "&node=nosuch":               "node",
		q + "&sort=peak":                 "sort",
	} {
		resp, body := fx.get(t, fleetPath+"?"+query)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), param) {
			t.Errorf("%s: %d %s, want 400 naming %s", query, resp.StatusCode, body, param)
		}
	}
}

// TestFleetOverviewOfNoNode: a server without any node says so.
func TestFleetOverviewOfNoNode(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "h", Node: "h", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ov := getOverview(t, newFixture(t, db, Options{}), "")
	if len(ov.Nodes) != 0 || !strings.Contains(ov.Message, "No node has samples yet") {
		t.Errorf("%+v", ov)
	}
}

// TestFleetOverviewCompact: the compact encoding (the UI's) holds the
// JSON answer: its header is the answer without the per-column arrays,
// and its columns are those arrays, node by node.
func TestFleetOverviewCompact(t *testing.T) {
	fx := newFixture(t, overviewFleet(t), Options{})
	from := float64(fleetStart) / 1e9
	q := "from=" + ftoa(from) + "&to=" + ftoa(from+30) + "&step=10s"
	for _, query := range []string{q, q + "&comm=kubelet", q + "&label=zone=mars", ""} {
		want := getOverview(t, fx, query)
		resp, body := fx.get(t, fleetPath+"?"+query+"&encoding=compact")
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != binaryType {
			t.Fatalf("%s: %d, content type %q: %.300s", query, resp.StatusCode, ct, body)
		}
		got, err := decodeCompactOverview(body)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		// The JSON's figures, to float32's precision.
		for i := range want.Nodes {
			n := &want.Nodes[i]
			for k := range n.Busiest {
				n.Busiest[k] = float64(float32(n.Busiest[k]))
				n.CPU[k] = float64(float32(n.CPU[k]))
			}
		}
		wb, _ := json.Marshal(want)
		gb, _ := json.Marshal(got)
		if string(wb) != string(gb) {
			t.Errorf("%s: compact\n%s\nwant\n%s", query, gb, wb)
		}
	}
	resp, body := fx.get(t, fleetPath+"?encoding=xml")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "encoding") {
		t.Errorf("encoding=xml: %d %s, want 400 naming encoding", resp.StatusCode, body)
	}
}

// decodeCompactOverview reads the compact encoding as docs/api.md
// describes it.
func decodeCompactOverview(b []byte) (*overview.Overview, error) {
	le := binary.LittleEndian
	if len(b) < compactHeaderLen || string(b[:4]) != compactOverviewMagic {
		return nil, fmt.Errorf("not a compact overview: %.20q", b)
	}
	n, c, j := int(le.Uint32(b[4:])), int(le.Uint32(b[8:])), int(le.Uint32(b[12:]))
	var ov overview.Overview
	if err := json.Unmarshal(b[compactHeaderLen:compactHeaderLen+j], &ov); err != nil {
		return nil, err
	}
	off := (compactHeaderLen + j + 7) &^ 7
	if len(b) != off+16*n*c || len(ov.Nodes) != n {
		return nil, fmt.Errorf("%d bytes, %d nodes in the header, for %d nodes × %d columns", len(b), len(ov.Nodes), n, c)
	}
	col := func(k, i int) uint32 { return le.Uint32(b[off+4*(k*n*c+i):]) }
	for r := range ov.Nodes {
		nd := &ov.Nodes[r]
		for i := r * c; i < (r+1)*c; i++ {
			nd.Busiest = append(nd.Busiest, float64(math.Float32frombits(col(0, i))))
			nd.CPU = append(nd.CPU, float64(math.Float32frombits(col(1, i))))
			nd.BusiestCPU = append(nd.BusiestCPU, int32(col(2, i)))
			nd.Samples = append(nd.Samples, int64(col(3, i)))
		}
	}
	return &ov, nil
}

// TestFleetOverviewWarm: after overview.Warm, the first overview the
// UI asks for (the whole span in that many columns) and a coarser one (a
// narrower window) read no block's per-CPU summary and answer as cold ones
// do; warm for fewer columns, one in more (a finer step) reads them once,
// then answers from the cache.
func TestFleetOverviewWarm(t *testing.T) {
	cold := newFixture(t, overviewFleet(t), Options{})
	want3 := getOverview(t, cold, "columns=3")
	if cold.db.Stats().CPUSummaryReads == 0 {
		t.Fatal("a cold overview read no per-CPU summary")
	}
	want1 := getOverview(t, cold, "columns=1")
	cells := overview.NewCells(0, 0)
	fx := newFixture(t, overviewFleet(t), Options{Overview: cells})
	if _, err := overview.Warm(context.Background(), fx.db, cells, 0); err == nil {
		t.Error("warming 0 columns: no error")
	}
	res, err := overview.Warm(context.Background(), fx.db, cells, 3)
	blocks := fx.db.Stats().Blocks
	if err != nil || res.Warmed != blocks || res.Pending != 0 || res.Step != int64(10*time.Second) {
		t.Fatalf("warm: %+v, %v; want %d blocks warmed at 10 s", res, err, blocks)
	}
	reads := fx.db.Stats().CPUSummaryReads
	for _, c := range []struct {
		query string
		want  overview.Overview
	}{{"columns=3", want3}, {"columns=1", want1}} {
		got := getOverview(t, fx, c.query)
		if more := fx.db.Stats().CPUSummaryReads - reads; more != 0 {
			t.Errorf("%s after warming read %d per-CPU summaries", c.query, more)
		}
		if names(got) != names(c.want) || len(got.Nodes) != 3 || got.Step != c.want.Step || got.Columns != c.want.Columns {
			t.Fatalf("%s: warm rows %s at %g s × %d, cold %s at %g s × %d", c.query, names(got), got.Step, got.Columns,
				names(c.want), c.want.Step, c.want.Columns)
		}
		for i := range c.want.Nodes {
			if !slices.Equal(got.Nodes[i].Busiest, c.want.Nodes[i].Busiest) || !slices.Equal(got.Nodes[i].CPU, c.want.Nodes[i].CPU) {
				t.Errorf("%s, %s: warm %v %v, cold %v %v", c.query, c.want.Nodes[i].Name, got.Nodes[i].Busiest, got.Nodes[i].CPU,
					c.want.Nodes[i].Busiest, c.want.Nodes[i].CPU)
			}
		}
	}
	if want1.Step <= want3.Step || want1.Columns != 1 {
		t.Fatalf("columns=1: a %g s step, %d columns; want one column coarser than %g s", want1.Step, want1.Columns, want3.Step)
	}

	// Warm for one column: three are finer, read once.
	cells = overview.NewCells(0, 0)
	fx = newFixture(t, overviewFleet(t), Options{Overview: cells})
	if res, err := overview.Warm(context.Background(), fx.db, cells, 1); err != nil || res.Step <= int64(10*time.Second) {
		t.Fatalf("warm for 1 column: %+v, %v", res, err)
	}
	reads = fx.db.Stats().CPUSummaryReads
	getOverview(t, fx, "columns=3")
	first := fx.db.Stats().CPUSummaryReads - reads
	getOverview(t, fx, "columns=3")
	if again := fx.db.Stats().CPUSummaryReads - reads - first; first == 0 || again != 0 {
		t.Errorf("finer than the warm step: %d summaries read, then %d again; want some, then none", first, again)
	}
}
