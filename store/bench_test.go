package store

import (
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// BenchmarkAppend measures ingest: decoded samples pushed into the WAL and
// the head on one goroutine (head cuts write blocks in the background, as
// in the recorder). Reported as samples per second.
func BenchmarkAppend(b *testing.B) { benchmarkAppend(b, false) }

// BenchmarkAppendContainers is BenchmarkAppend with container metadata on
// most samples.
func BenchmarkAppendContainers(b *testing.B) { benchmarkAppend(b, true) }

func benchmarkAppend(b *testing.B, containers bool) {
	g := synth.New(synth.Config{CPUs: 64, Hz: 99, Start: time.Now().UnixNano(), Seconds: 60, Stacks: 5000, Containers: containers})
	var samples []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		samples = append(samples, s)
	}
	db, err := Open(b.TempDir(), Options{Source: "host"})
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
