package store

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/synth"
)

// TestDirectoryAndItsShippedCopy: serve --data DIR --objstore-config
// BUCKET on a node whose recorder ships DIR's blocks to BUCKET (README's
// "and this machine's directory too") reads every block twice, once from
// each source. Each sample counts once: in samples, timelines and the
// per-CPU steps the overview reads.
func TestDirectoryAndItsShippedCopy(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	dir, n := nodeDir(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 60, Seed: 1})
	// The "bucket": another source holding the very same blocks.
	shipped := t.TempDir()
	if err := os.CopyFS(shipped, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, Options{ReadOnly: true, BlockSources: []BlockSource{DirSource(shipped)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := perNode(t, &db.Reader, Filter{}); got["node-a"] != n || len(got) != 1 {
		t.Errorf("samples per node %v, want node-a %d once", got, n)
	}
	r := Range{From: start - int64(10*time.Second), To: start + int64(80*time.Second)}
	f := Filter{IncludeIdle: true}
	tl, _, err := db.Timeline(context.Background(), r, int64(10*time.Second), &f)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for _, s := range tl.Samples {
		samples += s
	}
	if samples != int64(n) {
		t.Errorf("timeline: %d samples, want %d", samples, n)
	}
	steps, _, err := db.NodeCPUSteps(context.Background(), r, int64(10*time.Second), &f, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range steps {
		for i, ns := range nc.BusiestNs {
			if cov := nc.CoveredNs[i]; cov > 0 && ns > cov {
				t.Errorf("node %s step %d: busiest CPU %d ns in %d ns covered", nc.Node, i, ns, cov)
			}
		}
		var total int64
		for _, c := range nc.Samples {
			total += c
		}
		if total != int64(n) {
			t.Errorf("node %s: per-CPU steps hold %d samples, want %d", nc.Node, total, n)
		}
	}
	if nodes := db.Nodes(); len(nodes) != 1 || nodes[0].Samples != n {
		t.Errorf("nodes %+v, want node-a with %d samples", nodes, n)
	}
}

// shippedEvents is a block source that holds events too, as a bucket
// does: the events given, each labelled with its node and its recorder's
// instance as bucketstore labels them.
type shippedEvents struct {
	BlockSource
	evs []events.Event
}

func (s *shippedEvents) Events(context.Context) ([]events.Event, error) { return s.evs, nil }

// TestDirectoryAndItsShippedEvents: the events a recorder shipped are
// listed once beside its own data directory's, and those the directory
// no longer holds (its retention dropped them) are listed still.
func TestDirectoryAndItsShippedEvents(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	dir := t.TempDir()
	w, err := Open(dir, Options{Source: "node-a", Node: "node-a", BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	appendSynth(t, w, synth.Config{CPUs: 1, Hz: 99, Start: start, Seconds: 30})
	for i := range 3 {
		e := events.Event{Time: start + int64(i)*int64(time.Second), Source: "test", Severity: events.Info, Text: fmt.Sprintf("event %d", i)}
		if err := w.AppendEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	instance := w.Identity().Instance
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	local, _ := r.Events(everything, EventFilter{}, 0)
	r.Close()
	// The bucket's copy, with one event more that the directory's
	// retention dropped since.
	remote := []events.Event{{Time: start - int64(time.Minute), Source: "test", Severity: events.Info, Text: "dropped locally"}}
	remote = append(remote, local...)
	for i := range remote {
		remote[i].Labels = map[string]string{NodeLabel: "node-a", InstanceLabel: instance}
	}
	shipped := t.TempDir()
	if err := os.CopyFS(shipped, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, Options{ReadOnly: true, BlockSources: []BlockSource{&shippedEvents{DirSource(shipped), remote}}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	got, _ := db.Events(everything, EventFilter{}, 0)
	var texts []string
	for _, e := range got {
		texts = append(texts, e.Text)
	}
	if want := "dropped locally, event 0, event 1, event 2"; strings.Join(texts, ", ") != want {
		t.Errorf("events %q, want %s", texts, want)
	}
}
