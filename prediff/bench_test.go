package prediff

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// BenchmarkCompare compares the 5 s before each of 200 events (10 on each
// of 20 nodes, 5 minutes of 2 CPUs at 99 Hz of synthetic stacks each)
// against the 5 s before those, over a filesystem bucket read through
// bucketstore, as the query service reads one: the table alone, the tree
// alone, and the two pprof profiles. Chunks are cached after the first
// round, as they are for a query service answering the page's two
// requests.
func BenchmarkCompare(b *testing.B) {
	const nodes, perNode, seconds = 20, 10, 300
	bkt, err := bucket.Open(context.Background(), bucket.Config{Provider: "filesystem", Directory: b.TempDir()}, bucket.Options{Component: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer bkt.Close()
	start := fleetfixture.Start
	dir := b.TempDir()
	for n := range nodes {
		name := fmt.Sprintf("node-%02d", n)
		path := dir + "/" + name
		db, err := store.Open(path, store.Options{Source: name, Node: name, PeriodNs: int64(time.Second) / 99,
			BlockDuration: 2 * time.Minute, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: seconds, Stacks: 2000, Seed: uint64(n + 1)})
		var s sample.Sample
		for g.Next(&s) {
			if err := db.Append(&s); err != nil {
				b.Fatal(err)
			}
		}
		for e := range perNode {
			at := start + int64(e+1)*int64(seconds)*int64(time.Second)/(perNode+1)
			if err := db.AppendEvent(events.Event{Time: at, Source: "bench", Severity: events.Warning, Text: "reset",
				Labels: map[string]string{events.KindLabel: "ena-reset"}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		fleetfixture.Upload(b, bkt, name, path)
	}
	db, err := store.OpenReader([]store.BlockSource{bucketstore.New(bkt, bkt.Name(), bucketstore.Options{})}, store.ReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	base := Options{Kind: "ena-reset", Window: 5 * int64(time.Second), Range: store.Range{From: 0, To: 1 << 62}}
	for _, c := range []struct {
		name string
		run  func() (*Result, error)
	}{
		{"table", func() (*Result, error) {
			o := base
			o.Table = true
			r, _, err := Compare(context.Background(), db, o)
			return r, err
		}},
		{"tree", func() (*Result, error) {
			o := base
			o.Tree = true
			r, _, err := Compare(context.Background(), db, o)
			return r, err
		}},
		{"pprof", func() (*Result, error) {
			_, _, r, _, err := Profiles(context.Background(), db, base)
			return r, err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				r, err := c.run()
				if err != nil || len(r.Events) != nodes*perNode || r.A == 0 {
					b.Fatalf("%v, %d events", err, len(r.Events))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes*perNode)/1e3, "µs/event")
		})
	}
}
