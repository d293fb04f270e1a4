package otlpreceive

import (
	"context"
	"testing"

	"github.com/heatscope/heatscope/otlpprofile"
)

// BenchmarkIngest: one node's second of 64 CPUs at 99 Hz (realistic
// stacks, containers), from its protobuf to a real store: the receiver's
// work per request, without the network. samples/s is what one CPU takes.
func BenchmarkIngest(b *testing.B) {
	ds := newDirStores(b)
	r, err := New(Options{Open: ds.open, NodeRate: 1e9, TotalRate: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	want, p := workload(b, "bench", 64, 1, 1)
	body := marshal(b, p)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		p, err := otlpprofile.UnmarshalRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, e := r.ingest(context.Background(), p); e != nil {
			b.Fatal(e)
		}
	}
	b.ReportMetric(float64(len(want))*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}
