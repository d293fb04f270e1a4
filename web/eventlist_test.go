package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/store"
)

// TestEventListEncoding: the event lists encoded by hand are byte for
// byte what encoding/json makes of eventsJSON and fleetEventsJSON, for
// events whose strings need escaping (quotes, control and HTML
// characters, invalid UTF-8, U+2028), with and without labels, at odd
// times; and an empty list.
func TestEventListEncoding(t *testing.T) {
	evs := []events.Event{
		{Time: 1795132800123456789, Source: "kmsg", Severity: events.Warning, Text: `ena 0000:00:05.0: "reset" <device> & more`,
			Labels: map[string]string{"node": "ip-10-0-0-1", "pattern": "ena-reset", "zone": "eu-west-1a", "ω": "\u2028\t\x01"}},
		{Time: 1, Source: "api", Severity: events.Info, Text: "bad \xff utf-8 \\ end"},
		{Time: 1795132801000000000, Source: "heatscope", Severity: events.Err, Text: "", Labels: map[string]string{}},
		{Time: 999, Source: "deploy", Text: "naïve 漢字", Labels: map[string]string{"kind": "deploy"}},
	}
	for _, n := range []int{0, len(evs)} {
		want := eventsJSON{Events: []eventJSON{}, More: n == 0}
		for i := range evs[:n] {
			want.Events = append(want.Events, toEventJSON(&evs[i]))
		}
		wantB, _ := json.Marshal(want)
		got, err := listOfEvents(n, n == 0, "", 1<<20, func(out []byte, i int) []byte { return append(appendEventFields(out, &evs[i]), '}') })
		if err != nil || string(got) != string(wantB) {
			t.Errorf("events list of %d (err %v):\n got %s\nwant %s", n, err, got, wantB)
		}

		fleet := fleetEventsJSON{Events: []fleetEventJSON{}, More: true, Total: 7, Kinds: []countJSON{{"ena-reset", 2}},
			Nodes: []countJSON{}, Message: "none <here>"}
		for i := range evs[:n] {
			fleet.Events = append(fleet.Events, fleetEventJSON{eventJSON: toEventJSON(&evs[i]), Node: "n\"1", Kind: evs[i].Kind()})
		}
		wantB, _ = json.Marshal(fleet)
		got, err = eventList(n, true, 1<<20, func(out []byte, i int) []byte {
			out = append(appendEventFields(out, &evs[i]), `,"node":`...)
			out = append(appendString(out, "n\"1"), `,"kind":`...)
			return append(appendString(out, evs[i].Kind()), '}')
		})
		if err == nil {
			got, err = closeEventList(got, fleetEventCounts{Total: 7, Kinds: fleet.Kinds, Nodes: fleet.Nodes, Message: fleet.Message})
		}
		if err != nil || string(got) != string(wantB) {
			t.Errorf("fleet events list of %d (err %v):\n got %s\nwant %s", n, err, got, wantB)
		}
	}
	if _, err := listOfEvents(len(evs), false, "", 100, func(out []byte, i int) []byte { return append(appendEventFields(out, &evs[i]), '}') }); !errors.Is(err, errTooLarge) {
		t.Errorf("a list past the response limit: err %v, want errTooLarge", err)
	}
}

// BenchmarkFleetEventList lists a 200-node fleet's events, 60 a node
// (bench/fleet's hour of one a minute), read from a bucket (the
// filesystem provider) as serve --objstore-config reads them: all 12,000
// through /api/events (limit 10,000, as bench/fleet asks) and
// /api/fleet/events, over HTTP.
func BenchmarkFleetEventList(b *testing.B) {
	bkt, err := bucket.Open(context.Background(), bucket.Config{Provider: "filesystem", Directory: b.TempDir()}, bucket.Options{Logger: discard()})
	if err != nil {
		b.Fatal(err)
	}
	node := b.TempDir()
	db, err := store.Open(node, store.Options{Source: "n", Node: "n", Logger: discard()})
	if err != nil {
		b.Fatal(err)
	}
	texts := []string{"ena 0000:00:05.0: Reset triggered", "kubelet: PLEG is not healthy", "oom-kill: constraint=CONSTRAINT_MEMCG"}
	for i := range 60 {
		e := events.Event{Time: fleetfixture.Start + int64(i)*int64(time.Minute), Source: "kmsg", Severity: events.Warning, Text: texts[i%len(texts)]}
		if err := db.AppendEvent(e); err != nil {
			b.Fatal(err)
		}
	}
	db.Close()
	for n := range 200 {
		fleetfixture.Upload(b, bkt, fmt.Sprintf("node-%03d", n), node)
	}
	fleet, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, bkt.Name(), bucketstore.Options{})}, store.ReaderOptions{Logger: discard()})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	fx := newFixture(b, fleet, Options{})
	span := fmt.Sprintf("from=%d&to=%d", fleetfixture.Start/1e9, fleetfixture.Start/1e9+3600)
	for _, path := range []string{eventsPath + "?limit=10000&" + span, fleetEventsPath + "?limit=10000&" + span} {
		b.Run(path[:strings.Index(path, "?")], func(b *testing.B) {
			for b.Loop() {
				resp, body := fx.get(b, path)
				if resp.StatusCode != 200 || len(body) < 10000*100 {
					b.Fatalf("%s: %d, %d bytes", path, resp.StatusCode, len(body))
				}
			}
		})
	}
}
