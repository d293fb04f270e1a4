package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/benchcpu"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// BenchmarkAppend measures ingest: decoded samples pushed into the WAL and
// the head on one goroutine (head cuts write blocks in the background, as
// in the recorder). Reported as samples per second.
func BenchmarkAppend(b *testing.B) { benchmarkAppend(b, synth.Config{}) }

// BenchmarkAppendContainers is BenchmarkAppend with container metadata on
// most samples.
func BenchmarkAppendContainers(b *testing.B) { benchmarkAppend(b, synth.Config{Containers: true}) }

// BenchmarkAppendUnwind is BenchmarkAppend with the user frames of two
// thirds of the samples marked with how they were found (synth's Unwind:
// every stack three ways).
func BenchmarkAppendUnwind(b *testing.B) { benchmarkAppend(b, synth.Config{Unwind: true}) }

// benchmarkAppend appends 60 s of 64 CPUs of synthetic samples with cfg's
// options.
func benchmarkAppend(b *testing.B, cfg synth.Config) {
	cfg.CPUs, cfg.Hz, cfg.Start, cfg.Seconds, cfg.Stacks = 64, 99, time.Now().UnixNano(), 60, 5000
	g := synth.New(cfg)
	var samples []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		samples = append(samples, s)
	}
	db, err := store.Open(b.TempDir(), store.Options{Source: "host"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		s := samples[i%len(samples)]
		s.Time += int64(i/len(samples)) * 60e9
		db.Append(&s)
	}
	db.Flush()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "samples/s")
}

// BenchmarkSelect measures the read path: every sample of 10 minutes of 64
// CPUs at 99 Hz (3.8 M samples in imported blocks), read through Select
// from the blocks' data files. The chunk cache is smaller than the range,
// so every run reads and decodes every chunk. Reported per sample.
func BenchmarkSelect(b *testing.B) {
	db, r := benchDB(b)
	ctx := context.Background()
	b.ResetTimer()
	n := 0
	for range b.N {
		if _, err := db.Select(ctx, r, &store.Filter{}, func(bt *store.Batch) error { n += len(bt.Rows); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/sample")
}

// BenchmarkTimelineSummaries measures a timeline answered from the blocks'
// per-thread summaries (a comm filter, 10 s steps), indexes cached.
func BenchmarkTimelineSummaries(b *testing.B) {
	db, r := benchDB(b)
	r.From, r.To = r.From/10e9*10e9, (r.To/10e9+1)*10e9
	ctx := context.Background()
	defer benchcpu.PerOp(b)()
	for range b.N {
		if _, _, err := db.Timeline(ctx, r, 10e9, &store.Filter{Comm: "kubelet"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTimelineSummariesCoarse measures timelines at 60 s steps
// answered from the blocks' summaries, cut by the CPUs' time (the per-CPU
// steps the Reader keeps for its timelines): every thread, and a comm
// filter.
func BenchmarkTimelineSummariesCoarse(b *testing.B) {
	db, r := benchDB(b)
	r.From, r.To = r.From/60e9*60e9, (r.To/60e9+1)*60e9
	ctx := context.Background()
	for _, c := range []struct {
		name string
		f    store.Filter
	}{{"all", store.Filter{}}, {"comm", store.Filter{Comm: "kubelet"}}} {
		b.Run(c.name, func(b *testing.B) {
			defer benchcpu.PerOp(b)()
			for range b.N {
				if _, _, err := db.Timeline(ctx, r, 60e9, &c.f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchDB imports 10 minutes of 64 CPUs at 99 Hz and opens them
// read-only with a chunk cache of 1 M samples.
func benchDB(b *testing.B) (*store.DB, store.Range) {
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	return storetest.Imported(b, synth.Config{CPUs: 64, Hz: 99, Start: start, Seconds: 600}, store.Options{ChunkCacheSamples: 1 << 20})
}

// BenchmarkBuilderNewStacks measures Append on stacks a Builder has not
// seen, made of frames it has (synth's stacks are paths through one call
// tree per binary): what process churn brings, most samples of a new
// process being new stacks of known functions. Each round appends half of
// 5,000 distinct stacks to a Builder that holds the other half; reported
// per sample.
func BenchmarkBuilderNewStacks(b *testing.B) {
	g := synth.New(synth.Config{CPUs: 64, Hz: 99, Start: time.Now().UnixNano(), Seconds: 60, Stacks: 5000})
	var samples, warm []sample.Sample
	seen := map[*sample.Frame]bool{}
	var s sample.Sample
	for g.Next(&s) {
		if len(s.Stack) > 0 && !seen[&s.Stack[0]] { // the first sample of each stack
			seen[&s.Stack[0]] = true
			if len(seen)%2 == 0 {
				samples = append(samples, s)
			} else {
				warm = append(warm, s)
			}
		}
	}
	// The Builders first (each holding the other half), so that the
	// loop's CPU time is the appends'.
	builders := make([]*store.Builder, (b.N+len(samples)-1)/len(samples))
	for r := range builders {
		builders[r] = store.NewBuilder()
		for i := range warm {
			builders[r].Append(&warm[i])
		}
	}
	defer benchcpu.PerOp(b)()
	for i := range b.N {
		builders[i/len(samples)].Append(&samples[i%len(samples)])
	}
}
