package web

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/shipper"
	"github.com/heatscope/heatscope/store"
)

// TestEventsOfEveryInstance ships events of node a from three data
// directories through real shippers into MinIO, as recorders do: the
// first machine's, a reinstalled machine's (a new data directory, its
// segments numbered from 1 again, after the first one's), and a clone's
// that recorded while the first did; and node b's, under an object name
// from before instance ids. /api/events lists every one of them: the
// reinstalled directory replaced none of the first one's segments (before
// segment objects were named by instance it replaced them all), the two
// that overlap are shown apart (the clone as a@<its instance>) and a
// Warning says so, the old object is still read.
func TestEventsOfEveryInstance(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := srv.Open("fleet")
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UnixNano()
	ship := func(at int64, texts ...string) (instance string) {
		t.Helper()
		dir := t.TempDir()
		db, err := store.Open(dir, store.Options{Source: "a", Node: "a", Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range texts {
			if err := db.AppendEvent(events.Event{Time: at + int64(i)*int64(10*time.Second), Source: "kmsg", Severity: events.Warning, Text: text}); err != nil {
				t.Fatal(err)
			}
		}
		instance = db.Identity().Instance
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		sh, err := shipper.New(shipper.Options{Bucket: bkt, BucketName: bkt.Name(), Dir: dir, Node: "a", Instance: instance, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		return instance
	}
	first := ship(t0, "first machine 1", "first machine 2")
	reinstalled := ship(t0+int64(time.Minute), "reinstalled 1", "reinstalled 2")
	miniotest.UploadEvents(t, bkt, "b", []events.Event{{Time: t0, Source: "kmsg", Severity: events.Info, Text: "old object"}})

	db, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, bkt.Name(), bucketstore.Options{})}, store.ReaderOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fx := newFixture(t, db, Options{})
	list := func() (nodes, instances map[string]string, warnings []string) {
		t.Helper()
		resp, body := fx.get(t, eventsPath+"?limit=100")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", eventsPath, resp.StatusCode, body)
		}
		var got eventsJSON
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		nodes, instances = map[string]string{}, map[string]string{}
		for _, e := range got.Events {
			nodes[e.Text], instances[e.Text] = e.Labels[store.NodeLabel], e.Labels[store.InstanceLabel]
		}
		return nodes, instances, resp.Header.Values("Warning")
	}
	nodes, instances, warnings := list()
	want := map[string]string{"first machine 1": "a", "first machine 2": "a", "reinstalled 1": "a", "reinstalled 2": "a", "old object": "b"}
	if len(nodes) != len(want) {
		t.Fatalf("events by node %v, want %v", nodes, want)
	}
	for text, node := range want {
		if nodes[text] != node {
			t.Errorf("event %q: node %q, want %q (all %v)", text, nodes[text], node, nodes)
		}
	}
	if instances["first machine 2"] != first || instances["reinstalled 2"] != reinstalled || instances["old object"] != "" {
		t.Errorf("instance labels %v, want %s for the first machine's, %s for the reinstalled one's, none for the old object's", instances, first, reinstalled)
	}
	if len(warnings) != 0 {
		t.Errorf("a reinstalled machine's events, after the old one's, got warnings %q", warnings)
	}

	// A clone under node a recording while the first machine did.
	clone := ship(t0+int64(5*time.Second), "clone 1")
	if err := db.Refresh(); err != nil {
		t.Fatal(err)
	}
	nodes, _, warnings = list()
	if want := store.InstanceNodeName("a", clone); nodes["clone 1"] != want || nodes["first machine 1"] != "a" || nodes["reinstalled 1"] != "a" {
		t.Errorf("with a clone overlapping the first machine: events by node %v, want the clone's as %s", nodes, want)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "node a was recorded by 2 recorders at once") || !strings.Contains(warnings[0], clone) {
		t.Errorf("warnings %q, want one naming node a's two recorders and the clone's instance %s", warnings, clone)
	}
}
