package prediff

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/store"
)

const sec = int64(time.Second)

// openFleet uploads the standard fixture fleet to a real MinIO and opens
// a read-only DB over the bucket, as heatscope serve --objstore-config
// does.
func openFleet(t *testing.T) *store.Reader {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	fleetfixture.WriteFleet(t, bkt, t.TempDir(), fleetfixture.Fleet())
	src := bucketstore.New(bkt, bkt.Name(), bucketstore.Options{})
	db, err := store.OpenReader([]store.BlockSource{src}, store.ReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func all() store.Range { return store.Range{From: 0, To: 1 << 62} }

func find(fns []Function, name string) *Function {
	for i := range fns {
		if fns[i].Name == name {
			return &fns[i]
		}
	}
	return nil
}

// TestCompareBucket: over a bucket of four nodes, the resets' pre-event
// windows hold the culprit on the two nodes that have it, in CPU time
// (n2 samples at half the rate, yet weighs the same), it grew before 4
// of 4 resets on 2 nodes and tops the table; the steady load grew before
// none; the node and label filters choose whose events count; a kind no
// node has is an empty answer saying which kinds there are.
func TestCompareBucket(t *testing.T) {
	db := openFleet(t)
	ctx := context.Background()
	res, warnings, err := Compare(ctx, db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all(), Tree: true, Table: true,
		Focus: &Func{Name: fleetfixture.Culprit, Kind: "kernel"}})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("compare: %v %v", err, warnings)
	}
	if len(res.Events) != 4 || res.WithSamples != 4 || res.More {
		t.Fatalf("events %d (with samples %d, more %v), want 4", len(res.Events), res.WithSamples, res.More)
	}
	if res.A != 16*sec || res.B != 8*sec {
		t.Errorf("A %d ns, B %d ns: want 16 and 8 cpu-seconds", res.A, res.B)
	}
	for _, e := range res.Events {
		if e.A != 4*sec || e.B != 2*sec || e.FocusA != 2*sec || e.FocusB != 0 {
			t.Errorf("event %s at %d: A %d B %d, culprit A %d B %d; want 4, 2, 2, 0 cpu-seconds", e.Node, e.Time, e.A, e.B, e.FocusA, e.FocusB)
		}
	}
	if len(res.Nodes) != 2 || res.Nodes[0].Node != "n1" || res.Nodes[1].Node != "n2" ||
		res.Nodes[1].Events != 2 || res.Nodes[1].FocusGrew != 2 || res.Nodes[1].FocusA != 4*sec {
		t.Errorf("nodes %+v", res.Nodes)
	}
	top := res.Functions[0]
	if top.Name != fleetfixture.Culprit || top.A != 8*sec || top.B != 0 || top.Grew != 4 || top.Ran != 4 || top.GrewNodes != 2 || top.SelfA != 8*sec {
		t.Errorf("top grower %+v, want %s: A 8 cpu-s, grew before 4 of 4 on 2 nodes", top, fleetfixture.Culprit)
	}
	if top.Via != "" {
		t.Errorf("the culprit is marked a pass-through to %s", top.Via)
	}
	// Its caller passes all its growth to it: a pass-through.
	if f := find(res.Functions, fleetfixture.CulpritCaller); f == nil || f.A != 8*sec || f.SelfA != 0 || f.Grew != 4 ||
		f.Via != fleetfixture.Culprit || f.ViaKind != "kernel" || f.DeltaVia != 8*sec {
		t.Errorf("the culprit's caller: %+v", f)
	}
	if f := find(res.Functions, fleetfixture.Steady); f == nil || f.A != 8*sec || f.B != 8*sec || f.Grew != 0 || f.Ran != 4 {
		t.Errorf("the steady load: %+v, want A = B = 8 cpu-s, grew before none of 4", f)
	}
	// The tree: root A 16 B 8; kubelet only in A.
	if res.Root.A != 16*sec || res.Root.B != 8*sec {
		t.Errorf("tree root A %d B %d", res.Root.A, res.Root.B)
	}
	var kubelet *TreeNode
	for _, c := range res.Root.Children {
		if c.Name == fleetfixture.CulpritComm && c.Kind == "process" {
			kubelet = c
		}
	}
	if kubelet == nil || kubelet.A != 8*sec || kubelet.B != 0 || len(kubelet.Children) != 1 ||
		kubelet.Children[0].Name != fleetfixture.CulpritCaller || kubelet.Children[0].Children[0].SelfA != 8*sec {
		t.Errorf("kubelet's subtree: %+v", kubelet)
	}

	// Node and label filters choose the events.
	for _, c := range []struct {
		name   string
		f      store.Filter
		events int
	}{
		{"node n2", store.Filter{Nodes: []string{"n2"}}, 2},
		{"node ~^n[13]$", store.Filter{NodeRegex: regexp.MustCompile(`^n[13]$`)}, 2},
		{"label zone=b", store.Filter{NodeLabels: []store.Label{{Key: "zone", Value: "b"}}}, 2},
		{"label zone=a, node n3", store.Filter{Nodes: []string{"n3"}, NodeLabels: []store.Label{{Key: "zone", Value: "a"}}}, 0},
	} {
		res, _, err := Compare(ctx, db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all(), Filter: c.f, Table: true})
		if err != nil || len(res.Events) != c.events {
			t.Errorf("%s: %d events (%v), want %d", c.name, len(res.Events), err, c.events)
		}
	}
	// A sample filter applies inside the windows: only the steady command.
	res, _, err = Compare(ctx, db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all(), Filter: store.Filter{Comm: fleetfixture.SteadyComm}, Table: true})
	if err != nil || res.A != 8*sec || res.B != 8*sec || find(res.Functions, fleetfixture.Culprit) != nil {
		t.Errorf("comm=%s: A %d B %d, culprit %v (%v)", fleetfixture.SteadyComm, res.A, res.B, find(res.Functions, fleetfixture.Culprit), err)
	}
	// No event of that kind: empty, with the kinds there are.
	res, _, err = Compare(ctx, db, Options{Kind: "oom-kill", Window: 2 * sec, Range: all(), Table: true, Tree: true})
	if err != nil || len(res.Events) != 0 || len(res.Nodes) != 0 || res.Kinds["ena-reset"] != 4 || res.Kinds["cpu-saturation"] != 1 {
		t.Errorf("oom-kill: %+v (%v), want no event and the kinds ena-reset 4, cpu-saturation 1", res, err)
	}
	// A window longer than the data before the events: the B windows
	// start before the data, so they hold less.
	res, _, err = Compare(ctx, db, Options{Kind: "cpu-saturation", Window: 20 * sec, Range: all(), Table: true})
	if err != nil || len(res.Events) != 1 || res.Events[0].A != 20*sec || res.Events[0].B != 10*sec {
		t.Errorf("cpu-saturation, 20 s: %+v (%v), want A 20 cpu-s, B 10 (the data starts 30 s before)", res.Events, err)
	}
	// MaxEvents keeps the first events.
	res, _, err = Compare(ctx, db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all(), MaxEvents: 3, Table: true})
	if err != nil || len(res.Events) != 3 || !res.More || res.Events[2].Node != "n1" || res.Events[2].Time != fleetfixture.Start+40*sec {
		t.Errorf("MaxEvents 3: %d events, more %v (%v)", len(res.Events), res.More, err)
	}
	if _, _, err := Compare(ctx, db, Options{Kind: "ena-reset", Window: 0, Range: all()}); err == nil {
		t.Error("a window of 0 was accepted")
	}
}

// TestCompareLocal: over one node's data directory, opened read-only as
// heatscope serve opens it, the directory's own events (no node label)
// are its node's.
func TestCompareLocal(t *testing.T) {
	n := fleetfixture.Fleet()[0]
	path := fleetfixture.Write(t, t.TempDir(), n)
	db, err := store.Open(path, store.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.LocalNode() != "n1" {
		t.Fatalf("LocalNode %q, want n1", db.LocalNode())
	}
	res, _, err := Compare(context.Background(), db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all(), Table: true,
		Filter: store.Filter{Nodes: []string{"n1"}}})
	if err != nil || len(res.Events) != 2 || res.Events[0].Node != "n1" || res.A != 8*sec || res.B != 4*sec {
		t.Fatalf("local: %+v (%v)", res, err)
	}
	if top := res.Functions[0]; top.Name != fleetfixture.Culprit || top.Grew != 2 || top.GrewNodes != 1 {
		t.Errorf("top grower %+v", top)
	}
}

// TestProfilesDiffBase: the two pprof profiles, read by the real go tool
// pprof -diff_base, show the culprit's 8 cpu-seconds of growth and the
// steady load's none.
func TestProfilesDiffBase(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: go tool pprof needs the go command on PATH")
	}
	db := openFleet(t)
	a, b, res, _, err := Profiles(context.Background(), db, Options{Kind: "ena-reset", Window: 2 * sec, Range: all()})
	if err != nil || len(res.Events) != 4 {
		t.Fatalf("profiles: %v, %d events", err, len(res.Events))
	}
	if a.DurationNanos != 8*sec || b.DurationNanos != 8*sec {
		t.Errorf("durations %d and %d, want 4 windows of 2 s", a.DurationNanos, b.DurationNanos)
	}
	sum := func(p *profile.Profile) (ns int64, nodes map[string]bool) {
		nodes = map[string]bool{}
		for _, s := range p.Sample {
			ns += s.Value[1]
			nodes[strings.Join(s.Label["node"], ",")] = true
		}
		return ns, nodes
	}
	if ns, nodes := sum(a); ns != 16*sec || !nodes["n1"] || !nodes["n2"] || len(nodes) != 2 {
		t.Errorf("A: %d ns on nodes %v, want 16 cpu-s on n1 and n2", ns, nodes)
	}
	if ns, _ := sum(b); ns != 8*sec {
		t.Errorf("B: %d ns, want 8 cpu-s", ns)
	}
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "before.pb.gz"), filepath.Join(dir, "baseline.pb.gz")
	for p, prof := range map[string]*profile.Profile{pa: a, pb: b} {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := profileio.WritePprof(f, prof); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-diff_base", pb, pa).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -diff_base: %v\n%s", err, out)
	}
	var culprit, steady string
	for line := range strings.Lines(string(out)) {
		switch f := strings.Fields(line); {
		case len(f) > 0 && f[len(f)-1] == fleetfixture.Culprit:
			culprit = line
		case len(f) > 0 && f[len(f)-1] == fleetfixture.Steady:
			steady = line
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(culprit), "8s ") || steady != "" {
		t.Errorf("go tool pprof -top -diff_base: culprit line %q (want 8s of flat growth), steady line %q (want none: no change)\n%s", culprit, steady, out)
	}
	t.Logf("go tool pprof -top -diff_base:\n%s", out)
}
