package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// findNull returns the JSON path of the first null in v ("" when none).
func findNull(v any, at string) string {
	switch v := v.(type) {
	case nil:
		return at
	case map[string]any:
		for k, c := range v {
			if p := findNull(c, at+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, c := range v {
			if p := findNull(c, at+"["+strconv.Itoa(i)+"]"); p != "" {
				return p
			}
		}
	}
	return ""
}

// TestEmptyResults asks every endpoint for a selection no sample passes
// (a command that does not exist, a window without samples, a source whose
// range holds none): every answer is a 200 whose lists are [] (never null),
// and whose counts are zero.
func TestEmptyResults(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	// The recording is base+0.3 .. base+65.3, the capture base+70 .. base+73:
	// base+66 .. base+69 holds no sample at all.
	const gap = "from=1795237446&to=1795237449"
	for _, filter := range []string{"comm=nosuchcommand&" + queryA, gap, "comm=~^nosuch&" + queryA, "frame=nosuchframe&" + queryA} {
		baseline := "from2=1795237382&to2=1795237385&" // samples, none passing the filter
		if filter == gap {
			baseline = "from2=1795237446.5&to2=1795237447.5&"
		}
		for _, c := range []struct {
			target string
			empty  []string // the lists that must be []
		}{
			{"/api/timeline?" + filter, nil},
			{"/api/heatmap?" + filter, nil},
			{"/api/percpu?" + filter, []string{"cpus", "counts"}},
			{"/api/flamegraph?" + filter, nil},
			{"/api/flamegraph?group=pod&" + filter, nil},
			{"/api/diff?" + baseline + filter, nil},
			{"/api/top?" + filter, []string{"functions"}},
			{"/api/top?group=container&" + filter, []string{"functions"}},
			{"/api/top?" + baseline + filter, []string{"functions"}},
		} {
			resp, body := fx.get(t, c.target)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %d %s", c.target, resp.StatusCode, body)
				continue
			}
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Errorf("GET %s: %v", c.target, err)
				continue
			}
			if p := findNull(v, "$"); p != "" {
				t.Errorf("GET %s: null at %s in %s", c.target, p, clipBody(body))
			}
			for _, name := range c.empty {
				if l, ok := v[name].([]any); !ok || len(l) != 0 {
					t.Errorf("GET %s: %s is not [] in %s", c.target, name, clipBody(body))
				}
			}
			// No sample passes: every count in the answer is 0.
			for _, field := range []string{`"samples":`, `"samples2":`, `"samplesA":`, `"samplesB":`, `"cpu2":`, `"value":`, `"totalA":`, `"a":`, `"maxvalue":`} {
				if i := bytes.Index(body, []byte(field)); i >= 0 && body[i+len(field)] != '0' {
					t.Errorf("GET %s: %s not 0 in %s", c.target, field, clipBody(body))
				}
			}
		}
		// pprof: a valid profile without samples.
		resp, body := fx.get(t, "/api/pprof?"+filter)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("pprof %s: %d %s", filter, resp.StatusCode, body)
		} else if p, err := profile.ParseData(body); err != nil || len(p.Sample) != 0 {
			t.Errorf("pprof %s: %v, %v", filter, p, err)
		}
	}
	// Events of a window without any, and the sources of an empty store.
	const noneYet = `"message":"No events: none recorded yet (kernel log markers, CPU saturation, events posted to /api/events)."`
	resp, body := fx.get(t, "/api/events?from=1795237446&to=1795237449")
	if resp.StatusCode != http.StatusOK || string(body) != `{"events":[],"more":false,`+noneYet+`}` {
		t.Errorf("events: %d %s", resp.StatusCode, body)
	}
	db, err := store.Open(t.TempDir(), store.Options{Source: "none", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	empty := newFixture(t, db, Options{})
	if resp, body := empty.get(t, "/api/sources"); resp.StatusCode != http.StatusOK || string(body) != `[]` {
		t.Errorf("sources of an empty store: %d %s", resp.StatusCode, body)
	}
	if resp, body := empty.get(t, "/api/events"); resp.StatusCode != http.StatusOK || string(body) != `{"events":[],"more":false,`+noneYet+`}` {
		t.Errorf("events of an empty store: %d %s", resp.StatusCode, body)
	}
	if resp, body := empty.get(t, "/api/nodes"); resp.StatusCode != http.StatusOK || string(body) != `[]` {
		t.Errorf("nodes of an empty store: %d %s", resp.StatusCode, body)
	}
	// Lists and maps of what there is: a node without labels has {}.
	for _, target := range []string{"/api/nodes", "/api/sources"} {
		resp, body := fx.get(t, target)
		var v any
		if err := json.Unmarshal(body, &v); resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("GET %s: %d %s", target, resp.StatusCode, body)
		} else if p := findNull(v, "$"); p != "" {
			t.Errorf("GET %s: null at %s in %s", target, p, clipBody(body))
		}
	}
}

func clipBody(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// countIn counts the samples of r that f keeps, as the store gives them.
func countIn(t *testing.T, db Reader, r store.Range, f *store.Filter) int {
	t.Helper()
	n := 0
	if _, err := db.Select(context.Background(), r, f, func(b *store.Batch) error {
		n += len(b.Rows)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// messageOf reads the message of an answer of path: a JSON answer's
// "message" field, the compact tree's header's, a pprof profile's
// comments (joined).
func messageOf(t *testing.T, fx *fixture, target string) string {
	t.Helper()
	resp, body := fx.get(t, target)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, resp.StatusCode, body)
	}
	switch {
	case strings.HasPrefix(target, "/api/pprof"):
		p, err := profile.ParseData(body)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		return strings.Join(p.Comments, "\n")
	case strings.Contains(target, "encoding=compact"):
		d, err := decodeCompact(body)
		if err != nil || d.header.Message == nil {
			t.Fatalf("GET %s: %v, message %v", target, err, d)
		}
		return *d.header.Message
	}
	var v struct {
		Message *string `json:"message"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Message == nil {
		t.Fatalf("GET %s: %v, no message in %s", target, err, clipBody(body))
	}
	return *v.Message
}

// TestEmptyAnswersSayWhy asks every endpoint that answers a selection for
// selections no sample passes, over a real store through a real server:
// each answer carries a message saying what was empty and why (the
// filter matched none of the N samples the store holds in the window; no
// data in the window, and where the data is; a node filter that keeps no
// node; a window of the CPU idle loop alone), the same from every
// endpoint; an answer with samples has an empty message.
func TestEmptyAnswersSayWhy(t *testing.T) {
	db := testStore(t)
	fx := newFixture(t, db, Options{})
	nodes := db.Nodes()
	if len(nodes) != 1 {
		t.Fatalf("nodes %v, want the recording's one", nodes)
	}
	node := nodes[0].Name
	ft := query.FormatTime
	sources := db.Sources()
	first, last := sources[0].First, sources[0].Last
	for _, s := range sources {
		first, last = min(first, s.First), max(last, s.Last)
	}
	span := ft(first) + " to " + ft(last)
	gapR := store.Range{From: (base + 66) * 1e9, To: (base + 69) * 1e9}
	const gap = "from=1795237446&to=1795237449"
	// The capture's fourth sample, of the swapper (the idle loop), alone.
	idleR := store.Range{From: (base+70)*1e9 + 15e6, To: (base+70)*1e9 + 17e6}
	inA := countIn(t, db, rangeA, &store.Filter{})
	if inA == 0 {
		t.Fatal("no sample in range A")
	}
	for _, c := range []struct{ what, query, want string }{
		{"a command that does not exist", "comm=nosuchcommand&" + queryA,
			fmt.Sprintf(`None of the %d samples in the data from %s to %s passes the filter comm "nosuchcommand".`, inA, ft(rangeA.From), ft(rangeA.To))},
		{"two filters", "cpu=1&frame=nosuch&" + queryA,
			fmt.Sprintf(`None of the %d samples in the data from %s to %s passes the filter cpu "1", frame "nosuch".`, inA, ft(rangeA.From), ft(rangeA.To))},
		{"a window without data", gap,
			fmt.Sprintf(`No samples in the data from %s to %s: they span %s.`, ft(gapR.From), ft(gapR.To), span)},
		{"a node without data in the window", "node=" + node + "&" + gap,
			fmt.Sprintf(`No samples of node %q from %s to %s: they span %s.`, node, ft(gapR.From), ft(gapR.To), span)},
		{"a source without data in the window", "source=capture&from=1795237390&to=1795237400",
			fmt.Sprintf(`No samples of source "capture" from %s to %s: they span %s to %s.`, ft(rangeA.From), ft(rangeA.From+10e9),
				ft(db.SourcesOf(&store.Filter{Sources: []string{"capture"}})[0].First), ft(db.SourcesOf(&store.Filter{})[0].Last))},
		{"a node regexp that matches none", "node=~^nosuch&" + queryA,
			fmt.Sprintf(`No node matches node "~^nosuch": the data holds node %q.`, node)},
		{"a label no node has", "label=zone=mars&" + queryA,
			fmt.Sprintf(`No node matches label "zone=mars": the data holds node %q.`, node)},
		{"the idle loop alone", "source=capture&from=1795237450.015&to=1795237450.017",
			fmt.Sprintf(`No samples of source "capture" from %s to %s but 1 of the CPU idle loop, which the views leave out unless idle=include.`, ft(idleR.From), ft(idleR.To))},
	} {
		for _, path := range []string{"/api/timeline?step=1ms&", "/api/heatmap?", "/api/percpu?", "/api/flamegraph?", "/api/flamegraph?encoding=compact&",
			"/api/flamegraph?group=pod&", "/api/top?", "/api/top?group=container&", "/api/pprof?"} {
			target := path + c.query
			if strings.HasPrefix(path, "/api/timeline") && strings.Contains(c.query, queryA) {
				target = "/api/timeline?step=1s&" + c.query
			}
			if got := messageOf(t, fx, target); got != c.want {
				t.Errorf("%s, %s:\n got %q\nwant %q", c.what, target, got, c.want)
			}
		}
	}
	// Every answer with samples has an empty message; a pprof profile no
	// comment.
	for _, path := range []string{"/api/timeline?", "/api/heatmap?", "/api/percpu?", "/api/flamegraph?", "/api/flamegraph?encoding=compact&",
		"/api/top?", "/api/pprof?", "/api/diff?from2=1795237382.5&to2=1795237389.75&", "/api/diff?encoding=compact&from2=1795237382.5&to2=1795237389.75&",
		"/api/top?from2=1795237382.5&to2=1795237389.75&"} {
		if got := messageOf(t, fx, path+queryA); got != "" {
			t.Errorf("%s with samples: message %q", path+queryA, got)
		}
	}
	// A comparison: each window that holds nothing is named, the other not.
	inB := countIn(t, db, rangeB, &store.Filter{})
	for _, c := range []struct{ query, want string }{
		{"comm=nosuchcommand&from2=1795237382.5&to2=1795237389.75&" + queryA,
			fmt.Sprintf(`The selection A (from, to): none of the %d samples in the data from %s to %s passes the filter comm "nosuchcommand"; `+
				`the baseline B (from2, to2): none of the %d samples in the data from %s to %s passes the filter comm "nosuchcommand".`,
				inA, ft(rangeA.From), ft(rangeA.To), inB, ft(rangeB.From), ft(rangeB.To))},
		{"from2=1795237382.5&to2=1795237389.75&" + gap,
			fmt.Sprintf(`The selection A (from, to): no samples in the data from %s to %s: they span %s.`, ft(gapR.From), ft(gapR.To), span)},
		{"from2=1795237446&to2=1795237449&" + queryA,
			fmt.Sprintf(`The baseline B (from2, to2): no samples in the data from %s to %s: they span %s.`, ft(gapR.From), ft(gapR.To), span)},
	} {
		for _, path := range []string{"/api/diff?", "/api/diff?encoding=compact&", "/api/top?"} {
			if got := messageOf(t, fx, path+c.query); got != c.want {
				t.Errorf("%s:\n got %q\nwant %q", path+c.query, got, c.want)
			}
		}
	}
	// Without a window, a node filter that keeps no node leaves nothing
	// to default the window to: the 400 says why.
	for _, target := range []string{"/api/percpu?node=~^nosuch", "/api/heatmap?label=zone=mars", "/api/timeline?node=~^nosuch&to=1795237460"} {
		resp, body := fx.get(t, target)
		var e errorBody
		json.Unmarshal(body, &e)
		what := `node "~^nosuch"`
		if strings.Contains(target, "label") {
			what = `label "zone=mars"`
		}
		if want := fmt.Sprintf(`from: required: there is no data to default to: no node matches %s: the data holds node %q`, what, node); resp.StatusCode != http.StatusBadRequest ||
			e.Error != want || e.Param != "from" {
			t.Errorf("%s: %d %s, want 400 %q", target, resp.StatusCode, body, want)
		}
	}
	// Events: a window without any, a filter none passes, with or
	// without a node filter; a list with events has no message.
	for _, at := range []int64{base + 5, base + 30} {
		if err := db.AppendEvent(events.Event{Time: at * 1e9, Source: "test", Severity: events.Info, Text: "deploy"}); err != nil {
			t.Fatal(err)
		}
	}
	held := fmt.Sprintf("the data holds 2, from %s to %s.", ft((base+5)*1e9), ft((base+30)*1e9))
	for _, c := range []struct{ query, want string }{
		{gap, fmt.Sprintf(`No events from %s to %s: %s`, ft(gapR.From), ft(gapR.To), held)},
		{"node=" + node + "&" + gap, fmt.Sprintf(`No events of node %q from %s to %s: %s`, node, ft(gapR.From), ft(gapR.To), held)},
		{"source=nosuch", `No events of source "nosuch" at any time.`},
		{"kind=oom-kill&node=" + node, fmt.Sprintf(`No events of kind "oom-kill", node %q at any time.`, node)},
		{queryA, ""},
	} {
		if got := messageOf(t, fx, "/api/events?"+c.query); got != c.want {
			t.Errorf("/api/events?%s:\n got %q\nwant %q", c.query, got, c.want)
		}
	}
	// A node that does not exist is a 400 naming it, as before.
	if resp, body := fx.get(t, "/api/top?node=nosuch&"+queryA); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `no node named \"nosuch\"`) {
		t.Errorf("unknown node: %d %s", resp.StatusCode, body)
	}
}
