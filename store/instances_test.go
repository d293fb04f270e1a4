package store

import (
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
)

// TestInstancesShownApart: three data directories recorded node a: two
// over the same minute (two recorders given one name), a third later (a
// reinstalled machine: a new instance that overlaps none). The
// overlapping second instance is shown as its own node, a@<id>, with a
// notice; the first and the third stay node a; no sample is lost and
// none is counted under two names.
func TestInstancesShownApart(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	first, n1 := nodeDir(t, "a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 60, Seed: 1})
	clone, n2 := nodeDir(t, "a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start + int64(10*time.Second), Seconds: 60, Seed: 2})
	later, n3 := nodeDir(t, "a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start + int64(10*time.Minute), Seconds: 30, Seed: 3})
	instanceOf := func(dir string) string {
		id, ok, err := readIdentity(dir)
		if err != nil || !ok {
			t.Fatalf("identity of %s: %v %v", dir, ok, err)
		}
		return id.Instance
	}
	cloneName := InstanceNodeName("a", instanceOf(clone))
	db, err := OpenReader([]BlockSource{DirSource(clone), DirSource(later), DirSource(first)}, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := perNode(t, db, Filter{})
	if len(got) != 2 || got["a"] != n1+n3 || got[cloneName] != n2 {
		t.Fatalf("samples by node: %v; want a: %d (first and later instances), %s: %d", got, n1+n3, cloneName, n2)
	}
	if got := perNode(t, db, Filter{Nodes: []string{"a"}}); got["a"] != n1+n3 || len(got) != 1 {
		t.Fatalf("node=a selects %v, want the first and later instances' %d samples only", got, n1+n3)
	}
	notices := db.InstanceNotices()
	if len(notices) != 1 {
		t.Fatalf("notices: %v, want one", notices)
	}
	msg := notices[0].Error()
	for _, want := range []string{"node a was recorded by 2 recorders at once", "instance " + instanceOf(first) + " as node a,",
		"instance " + instanceOf(clone) + " as node " + cloneName, "never added together"} {
		if !strings.Contains(msg, want) {
			t.Errorf("notice %q does not say %q", msg, want)
		}
	}
	sources := map[string]int{}
	for _, src := range db.Sources() {
		sources[src.Name] = src.Samples
	}
	if len(sources) != 2 || sources["a"] != n1+n3 || sources[cloneName] != n2 {
		t.Errorf("sources: %v; the clone's recording is a source of its own, %s", sources, cloneName)
	}
	if got := perNode(t, db, Filter{Sources: []string{"a"}}); got["a"] != n1+n3 || len(got) != 1 {
		t.Errorf("source=a selects %v, want the first and later instances' %d samples only", got, n1+n3)
	}
	names := map[string]int{}
	for _, n := range db.Nodes() {
		names[n.Name] = n.Samples
	}
	if names["a"] != n1+n3 || names[cloneName] != n2 {
		t.Errorf("Nodes(): %v", names)
	}
	// Once the clone's blocks are gone, the node is whole again.
	db2, err := OpenReader([]BlockSource{DirSource(first), DirSource(later)}, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if n := db2.InstanceNotices(); len(n) != 0 {
		t.Errorf("notices without overlap: %v", n)
	}
}
