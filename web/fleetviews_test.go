package web

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/prediff"
	"github.com/heatscope/heatscope/store"
)

// bucketFleet uploads the fixture fleet (fleetfixture.Fleet: n1 and n2
// with resets and the culprit before each, n3 with one cpu-saturation
// event, n4 quiet) to a real MinIO and opens it as serve
// --objstore-config does.
func bucketFleet(t testing.TB) *store.Reader {
	t.Helper()
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	fleetfixture.WriteFleet(t, bkt, t.TempDir(), fleetfixture.Fleet())
	db, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, bkt.Name(), bucketstore.Options{})}, store.ReaderOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func getInto(t *testing.T, fx *fixture, target string, v any) {
	t.Helper()
	resp, body := fx.get(t, target)
	mustOK(t, target, resp, body)
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v\n%s", target, err, body)
	}
}

func nearly(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestFleetEvents lists every node's events with their counts, filtered
// by kind, node (name, list, regular expression) and label; /api/events
// takes the same node and label filters; an empty answer says why and
// lists [].
func TestFleetEvents(t *testing.T) {
	fx := newFixture(t, bucketFleet(t), Options{})
	var all fleetEventsJSON
	getInto(t, fx, fleetEventsPath, &all)
	if all.Total != 5 || len(all.Events) != 5 || all.More || all.Message != "" {
		t.Fatalf("all events: %+v, want 5", all)
	}
	if fmt.Sprint(all.Kinds) != "[{ena-reset 4} {cpu-saturation 1}]" || fmt.Sprint(all.Nodes) != "[{n1 2} {n2 2} {n3 1}]" {
		t.Errorf("counts by kind %v, by node %v", all.Kinds, all.Nodes)
	}
	first := all.Events[0]
	if first.Node != "n1" || first.Kind != "ena-reset" || first.Time != float64(fleetfixture.Start/1e9+20) || first.Text != "ena-reset on n1" {
		t.Errorf("first event %+v", first)
	}
	for _, c := range []struct {
		query, nodes, kinds string
		total, listed       int
	}{
		{"kind=ena-reset", "[{n1 2} {n2 2}]", "[{ena-reset 4} {cpu-saturation 1}]", 4, 4},
		{"node=n2,n3", "[{n2 2} {n3 1}]", "[{ena-reset 2} {cpu-saturation 1}]", 3, 3},
		{"node=" + url.QueryEscape("~^n[13]$"), "[{n1 2} {n3 1}]", "[{ena-reset 2} {cpu-saturation 1}]", 3, 3},
		{"label=zone=a&kind=cpu-saturation", "[{n3 1}]", "[{ena-reset 2} {cpu-saturation 1}]", 1, 1},
		{"limit=2", "[{n1 2} {n2 2} {n3 1}]", "[{ena-reset 4} {cpu-saturation 1}]", 5, 2},
	} {
		var got fleetEventsJSON
		getInto(t, fx, fleetEventsPath+"?"+c.query, &got)
		if got.Total != c.total || fmt.Sprint(got.Nodes) != c.nodes || fmt.Sprint(got.Kinds) != c.kinds || len(got.Events) != c.listed || got.More != (c.listed < c.total) {
			t.Errorf("%s: total %d, %d listed, nodes %v, kinds %v; want %d, nodes %s, kinds %s", c.query, got.Total, len(got.Events), got.Nodes, got.Kinds, c.total, c.nodes, c.kinds)
		}
	}
	// /api/events takes node and label.
	var evs eventsJSON
	getInto(t, fx, eventsPath+"?node=n2", &evs)
	if len(evs.Events) != 2 || evs.Events[0].Labels["node"] != "n2" {
		t.Errorf("/api/events?node=n2: %+v", evs)
	}
	getInto(t, fx, eventsPath+"?label=zone=a&kind=ena-reset", &evs)
	if len(evs.Events) != 2 || evs.Events[1].Labels["node"] != "n1" {
		t.Errorf("/api/events?label=zone=a&kind=ena-reset: %+v", evs)
	}
	// Empty: a message, lists [].
	resp, body := fx.get(t, fleetEventsPath+"?kind=oom-kill")
	mustOK(t, "oom-kill", resp, body)
	if !strings.Contains(string(body), `"events":[]`) || !strings.Contains(string(body), `"nodes":[]`) ||
		!strings.Contains(string(body), `"message":"no event of kind oom-kill on any node (5 of other kinds)"`) {
		t.Errorf("no oom-kill: %s", body)
	}
	resp, body = fx.get(t, fleetEventsPath+"?node=n4")
	mustOK(t, "n4", resp, body)
	if !strings.Contains(string(body), `"message":"no event on the selected nodes"`) || !strings.Contains(string(body), `"kinds":[]`) {
		t.Errorf("no event on n4: %s", body)
	}
	// Bad parameters: 400 naming them.
	for q, param := range map[string]string{
		"node=nope":    "node",
		"node=~(":      "node",
		"label=zone":   "label",
		"limit=0":      "limit",
		"from=yes":     "from",
		"comm=kubelet": "comm",
	} {
		resp, body := fx.get(t, fleetEventsPath+"?"+q)
		wantParamError(t, q, resp, body, param)
	}
	resp, body = fx.get(t, eventsPath+"?node=nope")
	wantParamError(t, "/api/events?node=nope", resp, body, "node")
}

// TestPrediffAPI: the pre-event diff of the fixture's resets over a
// bucket, in CPU-seconds: the culprit grew before 4 of 4 resets on 2
// nodes; per event and per node it is one function parameter away; the
// differential tree (JSON and compact) sums to the same; no such event is
// a clear message; bad parameters are 400s naming them.
func TestPrediffAPI(t *testing.T) {
	fx := newFixture(t, bucketFleet(t), Options{})
	var got prediffJSON
	getInto(t, fx, prediffPath+"?kind=ena-reset&window=2s", &got)
	if got.Unit != "cpu-seconds" || got.Window != 2 || len(got.Events) != 4 || got.WithSamples != 4 || got.EventNodes != 2 ||
		!nearly(got.A, 16) || !nearly(got.B, 8) || got.Message != "" || got.Focus != nil {
		t.Fatalf("prediff: %+v", got)
	}
	top := got.Functions[0]
	if top.Name != fleetfixture.Culprit || top.Kind != "kernel" || !nearly(top.Delta, 8) || !nearly(top.DeltaSelf, 8) || top.Grew != 4 || top.Ran != 4 || top.GrewNodes != 2 {
		t.Errorf("top grower %+v", top)
	}
	// One function: its figures per event and per node.
	getInto(t, fx, prediffPath+"?kind=ena-reset&window=2&function="+fleetfixture.Culprit+"&functionKind=kernel", &got)
	if got.Focus == nil || got.Focus.Name != fleetfixture.Culprit || len(got.Nodes) != 2 || got.Nodes[0].FocusGrew != 2 || !nearly(got.Nodes[1].FocusA, 4) {
		t.Fatalf("focus: %+v", got)
	}
	for _, e := range got.Events {
		if !nearly(e.FocusA, 2) || e.FocusB != 0 || !nearly(e.A, 4) || !nearly(e.B, 2) {
			t.Errorf("event %+v: want the culprit's 2 cpu-s in A, none in B", e)
		}
	}
	// Filters: zone b only; a sample filter inside the windows.
	getInto(t, fx, prediffPath+"?kind=ena-reset&window=2s&label=zone=b", &got)
	if len(got.Events) != 2 || got.Events[0].Node != "n2" || got.Functions[0].Grew != 2 || got.Functions[0].GrewNodes != 1 {
		t.Errorf("zone b: %+v", got)
	}
	getInto(t, fx, prediffPath+"?kind=ena-reset&window=2s&comm=app", &got)
	if !nearly(got.A, 8) || !nearly(got.B, 8) || got.Functions[0].Grew != 0 {
		t.Errorf("comm=app: %+v", got)
	}
	// The tree: prediff's, its CPU times in seconds.
	resp, body := fx.get(t, prediffDiffPath+"?kind=ena-reset&window=2s")
	mustOK(t, "tree", resp, body)
	res, _, err := prediff.Compare(t.Context(), fx.db, prediff.Options{Kind: "ena-reset", Window: 2e9, Range: store.Range{To: maxTime}, Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Root == nil || res.Root.A != 16e9 || res.Root.B != 8e9 {
		t.Fatalf("prediff tree: %+v", res.Root)
	}
	var tree any
	if err := json.Unmarshal(body, &tree); err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"unit": "cpu-seconds", "root": nestedPrediff(res.Root)}; !reflect.DeepEqual(tree, want) {
		t.Errorf("tree:\n%s\nwant\n%v", body, want)
	}
	resp, body = fx.get(t, prediffDiffPath+"?kind=ena-reset&window=2s&encoding=compact")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != binaryType {
		t.Fatalf("compact tree: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if string(body[:4]) != "HSD1" || !strings.Contains(string(body), `"unit":"cpu-nanoseconds","totalA":16000000000,"totalB":8000000000`) {
		t.Errorf("compact tree header: %q", body[:min(len(body), 200)])
	}
	// Nothing to compare: a message naming the kinds there are.
	resp, body = fx.get(t, prediffPath+"?kind=oom-kill&window=2s")
	mustOK(t, "oom-kill", resp, body)
	if !strings.Contains(string(body), `"message":"no oom-kill event on any node; the events there are of kinds ena-reset (4), cpu-saturation (1)"`) ||
		!strings.Contains(string(body), `"events":[]`) || !strings.Contains(string(body), `"functions":[]`) {
		t.Errorf("oom-kill: %s", body)
	}
	getInto(t, fx, prediffPath+"?kind=ena-reset&window=2s&comm=nothing-runs-this", &got)
	if !strings.HasPrefix(got.Message, "none of the 4 ena-reset events has a sample") || len(got.Functions) != 0 {
		t.Errorf("no sample in the windows: %+v", got)
	}
	resp, body = fx.get(t, prediffDiffPath+"?kind=oom-kill&window=2s")
	mustOK(t, "oom-kill tree", resp, body)
	for q, param := range map[string]string{
		"window=2s":                                    "kind",
		"kind=ena-reset":                               "window",
		"kind=ena-reset&window=0":                      "window",
		"kind=ena-reset&window=2h":                     "window",
		"kind=ena-reset&window=abc":                    "window",
		"kind=a%00b&window=2s":                         "kind",
		"kind=ena-reset&window=2s&node=zz":             "node",
		"kind=ena-reset&window=2s&events=0":            "events",
		"kind=ena-reset&window=2s&limit=x":             "limit",
		"kind=ena-reset&window=2s&function=f":          "functionKind",
		"kind=ena-reset&window=2s&functionKind=kernel": "functionKind",
		"kind=ena-reset&window=2s&from=2&to=1":         "to",
		"kind=ena-reset&window=2s&frame=(":             "frame",
	} {
		resp, body := fx.get(t, prediffPath+"?"+q)
		wantParamError(t, q, resp, body, param)
	}
	resp, body = fx.get(t, prediffDiffPath+"?kind=ena-reset&window=2s&encoding=xml")
	wantParamError(t, "encoding=xml", resp, body, "encoding")
	if resp.StatusCode == http.StatusInternalServerError {
		t.Error("a 500")
	}
}

// nestedPrediff is n as /api/fleet/prediff/diff's nested JSON decodes
// into an any (CPU times in seconds), built independently of encode.go.
func nestedPrediff(n *prediff.TreeNode) map[string]any {
	s := func(ns int64) float64 { return float64(ns) / 1e9 }
	out := map[string]any{"name": n.Name, "kind": n.Kind, "a": s(n.A), "b": s(n.B), "selfA": s(n.SelfA), "selfB": s(n.SelfB)}
	if len(n.Children) > 0 {
		kids := make([]any, len(n.Children))
		for i, c := range n.Children {
			kids[i] = nestedPrediff(c)
		}
		out["children"] = kids
	}
	return out
}

// TestFleetPages: each fleet page is served whole, in the frame every one
// shares: the header's links with its own marked, its own form, and its
// footer naming its endpoint.
func TestFleetPages(t *testing.T) {
	fx := newFixture(t, uiStore(t), Options{})
	for _, c := range []struct{ path, nav, form, api string }{
		{"/fleet/events", `<a href="/fleet/events" aria-current="page">fleet events</a> <a href="/fleet/prediff">pre-event diff</a></nav>`, `<form id="fe-filters"`, fleetEventsPath},
		{"/fleet/prediff", `<a href="/fleet/events">fleet events</a> <a href="/fleet/prediff" aria-current="page">pre-event diff</a></nav>`, `<form id="pd-filters"`, prediffPath},
	} {
		resp, body := fx.get(t, c.path)
		page := string(body)
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/html; charset=utf-8" {
			t.Fatalf("%s: status %d, Content-Type %q", c.path, resp.StatusCode, ct)
		}
		for _, want := range []string{"<!DOCTYPE html>\n", `<nav class="fleet-nav"><a href="/">node view</a> ` + c.nav, c.form, "<code>" + c.api + "</code>", "</html>\n"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s lacks %q:\n%s", c.path, want, page)
			}
		}
		if strings.Contains(page, "{{") || !strings.HasPrefix(page, "<!DOCTYPE html>") {
			t.Errorf("%s: not a whole page:\n%s", c.path, page)
		}
	}
}

// TestFleetEventsDefaultKind: the pre-event diff's default kind is the most
// frequent incident, never the overhead guard's episodes however many
// there are; with no incident there is no default.
func TestFleetEventsDefaultKind(t *testing.T) {
	for _, c := range []struct {
		kinds []string
		want  string
	}{
		{[]string{"overhead-guard", "overhead-guard", "overhead-guard", "oom-kill", "cpu-saturation", "cpu-saturation"}, "cpu-saturation"},
		{[]string{"overhead-guard", "overhead-guard", "oom-kill"}, "oom-kill"},
		{[]string{"overhead-guard"}, ""},
	} {
		db, err := store.Open(t.TempDir(), store.Options{Source: "n", Node: "n", Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		for i, kind := range c.kinds {
			e := events.Event{Time: fleetfixture.Start + int64(i)*int64(time.Minute), Source: "heatscope", Severity: events.Warning,
				Text: kind + " " + strconv.Itoa(i), Labels: map[string]string{events.KindLabel: kind}}
			if err := db.AppendEvent(e); err != nil {
				t.Fatal(err)
			}
		}
		fx := newFixture(t, db, Options{})
		var got fleetEventsJSON
		getInto(t, fx, fleetEventsPath, &got)
		if got.DefaultKind != c.want || len(got.Kinds) == 0 || got.Kinds[0].Name != c.kinds[0] || got.Total != len(c.kinds) {
			t.Errorf("events of kinds %v: default kind %q, kinds %v, total %d; want default %q, the most frequent (%s) still listed first",
				c.kinds, got.DefaultKind, got.Kinds, got.Total, c.want, c.kinds[0])
		}
		db.Close()
	}
}
