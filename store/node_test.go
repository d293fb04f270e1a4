package store

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// nodeDir records cfg into a new data directory as node, with labels, and
// closes it (every sample sealed into blocks). It returns the directory
// and the number of samples.
func nodeDir(t *testing.T, node string, labels map[string]string, cfg synth.Config) (string, int) {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: node, Node: node, NodeLabels: labels, BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := len(appendSynth(t, db, cfg))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, n
}

// perNode counts the samples of a Select by their batch's node.
func perNode(t *testing.T, db *Reader, f Filter) map[string]int {
	t.Helper()
	f.IncludeIdle = true
	got := map[string]int{}
	warnings, err := db.Select(context.Background(), everything, &f, func(b *Batch) error {
		got[b.Node] += len(b.Rows)
		return nil
	})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("select: %v, warnings %v", err, warnings)
	}
	return got
}

// TestBlocksFromSeveralSources reads two nodes' data directories through
// the BlockSource seam (the way a bucket is read: blocks opened when a
// query needs them), with node and node-label filters.
func TestBlocksFromSeveralSources(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	a, wantA := nodeDir(t, "node-a", map[string]string{"zone": "us-east-1a"}, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 60, Seed: 1})
	b, wantB := nodeDir(t, "node-b", map[string]string{"zone": "us-east-1b"}, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 60, Seed: 2})
	db, err := OpenReader([]BlockSource{DirSource(a), DirSource(b)}, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	got := perNode(t, db, Filter{})
	if got["node-a"] != wantA || got["node-b"] != wantB || len(got) != 2 {
		t.Fatalf("samples per node %v, want node-a %d, node-b %d", got, wantA, wantB)
	}
	for _, c := range []struct {
		name string
		f    Filter
		want map[string]int
	}{
		{"exact", Filter{Nodes: []string{"node-b"}}, map[string]int{"node-b": wantB}},
		{"list", Filter{Nodes: []string{"node-b", "node-a"}}, map[string]int{"node-a": wantA, "node-b": wantB}},
		{"regex", Filter{NodeRegex: regexp.MustCompile("-a$")}, map[string]int{"node-a": wantA}},
		{"label", Filter{NodeLabels: []Label{{"zone", "us-east-1b"}}}, map[string]int{"node-b": wantB}},
		{"label and node disagree", Filter{Nodes: []string{"node-a"}, NodeLabels: []Label{{"zone", "us-east-1b"}}}, map[string]int{}},
		{"missing label", Filter{NodeLabels: []Label{{"cluster", "x"}}}, map[string]int{}},
	} {
		if got := perNode(t, db, c.f); !mapsEqual(got, c.want) {
			t.Errorf("%s: samples per node %v, want %v", c.name, got, c.want)
		}
	}

	nodes := db.Nodes()
	if len(nodes) != 2 || nodes[0].Name != "node-a" || nodes[1].Name != "node-b" {
		t.Fatalf("nodes %+v, want node-a and node-b", nodes)
	}
	if nodes[0].Labels["zone"] != "us-east-1a" || nodes[1].Samples != wantB || nodes[1].Blocks < 3 ||
		nodes[0].First < start || nodes[0].Last > start+int64(61*time.Second) {
		t.Errorf("nodes %+v: want labels, sample counts, several blocks, and spans within the recording", nodes)
	}

	// Timelines from the blocks' summaries honour the node filter too.
	r := Range{From: start / 10e9 * 10e9, To: (start/10e9 + 7) * 10e9}
	counts, warnings, err := db.Timeline(context.Background(), r, 10e9, &Filter{Nodes: []string{"node-a"}, IncludeIdle: true})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("timeline: %v, %v", err, warnings)
	}
	var sum int64
	for _, c := range counts.Samples {
		sum += c
	}
	if sum != int64(wantA) {
		t.Errorf("node-a's timeline counts %d samples, want %d", sum, wantA)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSourceRefresh: a source's new blocks show up at Refresh, deleted ones
// go, and a damaged block of a lazily opened source is skipped and named
// when a query first reads it.
func TestSourceRefresh(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	a, _ := nodeDir(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 40, Seed: 1})
	db, err := OpenReader([]BlockSource{DirSource(a)}, ReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := perNode(t, db, Filter{})["node-a"]

	// The same node records on; its new blocks appear at the next Refresh.
	w, err := Open(a, Options{Source: "node-a", Node: "node-a", BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	added := len(appendSynth(t, w, synth.Config{CPUs: 2, Hz: 99, Start: start + int64(time.Minute), Seconds: 40, Seed: 3}))
	w.Close()
	if got := perNode(t, db, Filter{})["node-a"]; got != before {
		t.Fatalf("before Refresh: %d samples, want still %d", got, before)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	after := perNode(t, db, Filter{})["node-a"]
	if after != before+added {
		t.Fatalf("after Refresh: %d samples, want %d", after, before+added)
	}

	// Truncate one block's data: a query service that had not read it yet
	// skips it, names it in its warnings and counts it; the other blocks
	// still answer.
	entries, err := os.ReadDir(filepath.Join(a, blocksDir))
	if err != nil {
		t.Fatal(err)
	}
	victim := entries[0].Name()
	data := filepath.Join(a, blocksDir, victim, BlockDataFile)
	fi, _ := os.Stat(data)
	if err := os.Truncate(data, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = OpenReader([]BlockSource{DirSource(a)}, ReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	corruptBefore := db.Stats().CorruptSkips
	var got int
	f := Filter{IncludeIdle: true}
	warnings, err := db.Select(context.Background(), everything, &f, func(b *Batch) error {
		got += len(b.Rows)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].Error(), victim) {
		t.Fatalf("warnings %v, want one naming block %s", warnings, victim)
	}
	if got == 0 || got >= after {
		t.Errorf("%d samples answered beside the damaged block, want some but fewer than %d", got, after)
	}
	if db.Stats().CorruptSkips <= corruptBefore {
		t.Errorf("corrupt skips %d, want more than %d", db.Stats().CorruptSkips, corruptBefore)
	}

	// A deleted block leaves at the next Refresh.
	if err := os.RemoveAll(filepath.Join(a, blocksDir, victim)); err != nil {
		t.Fatal(err)
	}
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	if n := perNode(t, db, Filter{})["node-a"]; n != got {
		t.Errorf("after deleting the damaged block: %d samples, want %d", n, got)
	}
	if slices.ContainsFunc(db.Nodes(), func(n NodeInfo) bool { return n.Blocks != len(entries)-1 }) {
		t.Errorf("nodes %+v, want %d blocks", db.Nodes(), len(entries)-1)
	}
}

// TestLocalBlocksTakeTheNodeName: blocks written before nodes take the
// directory's node; new blocks record the writer's node and labels.
func TestLocalBlocksTakeTheNodeName(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", Node: "n1", NodeLabels: map[string]string{"zone": "z"}, BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	appendSynth(t, db, synth.Config{CPUs: 1, Hz: 99, Start: time.Now().Add(-time.Hour).UnixNano(), Seconds: 30})
	db.Close()
	entries, _ := os.ReadDir(filepath.Join(dir, blocksDir))
	m, err := ReadMeta(filepath.Join(dir, blocksDir, entries[0].Name(), BlockMetaFile))
	if err != nil || m.Node != "n1" || m.NodeLabels["zone"] != "z" {
		t.Fatalf("meta %+v (%v), want node n1 with zone z", m, err)
	}
	// Read by a process that calls its machine something else: the blocks
	// keep their node.
	r, err := Open(dir, Options{ReadOnly: true, Node: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := r.Nodes(); len(n) != 1 || n[0].Name != "n1" {
		t.Errorf("nodes %+v, want n1", n)
	}
}

// TestOpenRefusesSourcesOnAWriter: other sources only for readers.
func TestOpenRefusesSourcesOnAWriter(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{BlockSources: []BlockSource{DirSource(t.TempDir())}}); err == nil {
		t.Error("a writable DB took another block source")
	}
	if _, err := Open("", Options{ReadOnly: true, BlockSources: []BlockSource{DirSource(t.TempDir())}}); err == nil {
		t.Error("a DB without a directory opened")
	}
	if _, err := OpenReader(nil, ReaderOptions{}); err == nil {
		t.Error("a reader without sources opened")
	}
}

// TestDirectoryBesideSources: a read-only directory and another source
// answer together (serve --data with --objstore-config).
func TestDirectoryBesideSources(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	a, nA := nodeDir(t, "node-a", nil, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 30, Seed: 1})
	b, nB := nodeDir(t, "node-b", nil, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 30, Seed: 2})
	db, err := Open(a, Options{ReadOnly: true, BlockSources: []BlockSource{DirSource(b)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := perNode(t, &db.Reader, Filter{}); got["node-a"] != nA || got["node-b"] != nB {
		t.Fatalf("samples per node %v, want node-a %d (the directory) and node-b %d (the other source)", got, nA, nB)
	}
}

// TestNodeEvents: a directory's own events are its node's, a labelled
// event its label's; the node filter selects by name and by label.
func TestNodeEvents(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	db, err := Open(t.TempDir(), Options{Source: "host", Node: "n1", NodeLabels: map[string]string{"zone": "z"}, BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	appendSynth(t, db, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 30})
	for i, e := range []events.Event{
		{Source: "test", Text: "own", Labels: map[string]string{events.KindLabel: "deploy"}},
		{Source: "test", Text: "n2's", Labels: map[string]string{NodeLabel: "n2", events.KindLabel: "deploy"}},
		{Source: "test", Text: "own, other kind", Labels: map[string]string{events.KindLabel: "oom"}},
	} {
		e.Time, e.Severity = start+int64(i)*int64(time.Second), events.Info
		if err := db.AppendEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	deploys := EventFilter{Kinds: []string{"deploy"}}
	got := func(ef EventFilter, f Filter) string {
		var out []string
		for _, e := range db.NodeEvents(everything, ef, &f) {
			out = append(out, e.Text+"@"+e.Node+"/"+e.NodeLabels["zone"])
		}
		return strings.Join(out, ", ")
	}
	for _, c := range []struct {
		ef   EventFilter
		f    Filter
		want string
	}{
		{EventFilter{}, Filter{}, "own@n1/z, n2's@n2/, own, other kind@n1/z"},
		{deploys, Filter{}, "own@n1/z, n2's@n2/"},
		{deploys, Filter{Nodes: []string{"n2"}}, "n2's@n2/"},
		{deploys, Filter{NodeRegex: regexp.MustCompile(`1$`)}, "own@n1/z"},
		{EventFilter{}, Filter{NodeLabels: []Label{{"zone", "z"}}}, "own@n1/z, own, other kind@n1/z"},
		{deploys, Filter{NodeLabels: []Label{{"zone", "y"}}}, ""},
	} {
		if g := got(c.ef, c.f); g != c.want {
			t.Errorf("kinds %v, filter %+v: %q, want %q", c.ef.Kinds, c.f, g, c.want)
		}
	}
}

// TestSourceDefaultsToTheNode: without a source name, a recording is the
// source named after its node, not the hostname: two nodes cloned from
// one image (one hostname) recorded as one source, which a node's view
// then counted twice.
func TestSourceDefaultsToTheNode(t *testing.T) {
	db, err := Open(t.TempDir(), Options{Node: "node-a", PeriodNs: int64(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := sample.Sample{Time: time.Now().UnixNano(), CPU: 0, PID: 1, TID: 1, Comm: "x",
		Stack: []sample.Frame{{Function: "f", Module: "/bin/x", Kind: sample.KindUser}}}
	if err := db.Append(&s); err != nil {
		t.Fatal(err)
	}
	if got := db.Sources(); len(got) != 1 || got[0].Name != "node-a" || got[0].Samples != 1 {
		t.Errorf("sources %+v, want node-a's one sample as source node-a", got)
	}
}
