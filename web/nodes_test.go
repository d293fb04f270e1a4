package web

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// fleetStore records 30 s on each of three nodes, each into a data
// directory of its own (node-a and node-b in zone us-east-1a, node-c in
// us-east-1b; node-c runs only "kubelet"), and opens them together as
// the query service opens a bucket: through block sources. It returns the
// store and each node's sample count.
func fleetStore(t testing.TB) (*store.Reader, map[string]int) {
	t.Helper()
	counts := map[string]int{}
	var sources []store.BlockSource
	for i, n := range []struct{ name, zone string }{{"node-a", "us-east-1a"}, {"node-b", "us-east-1a"}, {"node-c", "us-east-1b"}} {
		dir := t.TempDir()
		db, err := store.Open(dir, store.Options{Source: n.name, Node: n.name, NodeLabels: map[string]string{"zone": n.zone},
			PeriodNs: hostPeriod, BlockDuration: 20 * time.Second, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		g := synth.New(synth.Config{CPUs: 2, Hz: 49, Start: synthStart, Seconds: 30, Stacks: 50, Seed: uint64(i + 1)})
		var s sample.Sample
		for g.Next(&s) {
			s.Time = s.Time / 1000 * 1000
			if n.name == "node-c" {
				s.Comm = "kubelet"
			}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			counts[n.name]++
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		sources = append(sources, store.DirSource(dir))
	}
	db, err := store.OpenReader(sources, store.ReaderOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, counts
}

// TestNodes lists the fleet's nodes, and filters every endpoint by node
// name, list, regular expression and label.
func TestNodes(t *testing.T) {
	db, counts := fleetStore(t)
	fx := newFixture(t, db, Options{})

	resp, body := fx.get(t, "/api/nodes")
	mustOK(t, "nodes", resp, body)
	var nodes []nodeJSON
	if err := json.Unmarshal(body, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 || nodes[0].Name != "node-a" || nodes[2].Name != "node-c" {
		t.Fatalf("nodes %s, want node-a, node-b, node-c", body)
	}
	for _, n := range nodes {
		if n.Samples != counts[n.Name] || n.Blocks < 2 || len(n.Sources) != 1 || n.Sources[0] != n.Name || n.First < float64(base) || n.Last > float64(base+31) || n.Labels["zone"] == "" {
			t.Errorf("node %+v: want %d samples in blocks, with a zone, within the recording", n, counts[n.Name])
		}
	}

	// The count of samples each filter selects, idle included, by the
	// heatmap (which sums them) and the pprof download (which labels each
	// with its node).
	r := "from=1795237380&to=1795237420&idle=include"
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{"node-a", "node-b", "node-c"}},
		{"node=node-b", []string{"node-b"}},
		{"node=node-c,node-a", []string{"node-a", "node-c"}},
		{"node=" + url.QueryEscape("~^node-[bc]$"), []string{"node-b", "node-c"}},
		{"label=zone=us-east-1a", []string{"node-a", "node-b"}},
		{"label=zone=us-east-1b&comm=kubelet", []string{"node-c"}},
		{"label=zone=us-east-1c", nil},
	} {
		want := 0
		for _, n := range c.want {
			want += counts[n]
		}
		resp, body := fx.get(t, withQuery("/api/heatmap", r, c.query))
		mustOK(t, "heatmap "+c.query, resp, body)
		var h query.Heatmap
		if err := json.Unmarshal(body, &h); err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, col := range h.Values {
			for _, v := range col {
				got += int(v)
			}
		}
		if got != want {
			t.Errorf("heatmap with %q: %d samples, want %d (%v)", c.query, got, want, c.want)
		}

		resp, body = fx.get(t, withQuery("/api/pprof", r, c.query))
		mustOK(t, "pprof", resp, body)
		p, err := profile.ParseData(body)
		if err != nil {
			t.Fatal(err)
		}
		byNode := map[string]int{}
		for _, s := range p.Sample {
			if len(s.Label["node"]) != 1 {
				t.Fatalf("pprof sample without a node label: %v", s.Label)
			}
			byNode[s.Label["node"][0]] += int(s.Value[0])
		}
		var names []string
		for n, v := range byNode {
			names = append(names, n)
			if v != counts[n] {
				t.Errorf("pprof with %q: node %s has %d samples, want %d", c.query, n, v, counts[n])
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, c.want) {
			t.Errorf("pprof with %q: nodes %v, want %v", c.query, names, c.want)
		}
	}

	// Timelines from the summaries honour the node filter.
	resp, body = fx.get(t, "/api/timeline?from=1795237380&to=1795237420&step=10s&idle=include&node=node-a")
	mustOK(t, "timeline", resp, body)
	var tl timelineJSON
	json.Unmarshal(body, &tl)
	sum := int64(0)
	for _, c := range tl.Counts {
		sum += c
	}
	if sum != int64(counts["node-a"]) {
		t.Errorf("node-a's timeline counts %d samples, want %d", sum, counts["node-a"])
	}

	// Default ranges follow the selected nodes.
	resp, body = fx.get(t, "/api/heatmap?label=zone=us-east-1c")
	if resp.StatusCode != 400 || !strings.Contains(string(body), `there is no data to default to: no node matches label \"zone=us-east-1c\"`) {
		t.Errorf("a heatmap of no node without a range: %d %s, want a 400 saying there is nothing to default to", resp.StatusCode, body)
	}
}

// TestNoNodes: an empty store lists no node as [], not null.
func TestNoNodes(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{ReadOnly: true, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fx := newFixture(t, db, Options{})
	resp, body := fx.get(t, "/api/nodes")
	mustOK(t, "nodes", resp, body)
	if string(body) != "[]" {
		t.Errorf("nodes of an empty store: %s, want []", body)
	}
}
