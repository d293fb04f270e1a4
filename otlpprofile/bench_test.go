package otlpprofile

import (
	"testing"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// benchSamples is five seconds of a 64-CPU node at 99 Hz, with
// containers and unwind marks: one batch of the exporter's.
func benchSamples(b *testing.B) []sample.Sample {
	g := synth.New(synth.Config{CPUs: 64, Hz: 99, Start: 1_790_000_000_000_000_000, Seconds: 5, Seed: 1, Containers: true, Unwind: true, Python: true})
	var out []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		s.PeriodNs = 10_101_010
		out = append(out, s)
	}
	return out
}

// BenchmarkEncode: encoding a batch and marshaling it, per sample.
func BenchmarkEncode(b *testing.B) {
	ss := benchSamples(b)
	e := NewEncoder("bench", "node", 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := &ss[i%len(ss)]
		e.Add(s)
		if e.Len() == len(ss) {
			if _, err := MarshalRequest(e.Profiles()); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecode: decoding a marshaled batch, per sample.
func BenchmarkDecode(b *testing.B) {
	ss := benchSamples(b)
	e := NewEncoder("bench", "node", 0)
	for i := range ss {
		e.Add(&ss[i])
	}
	req, err := MarshalRequest(e.Profiles())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(req)) / int64(len(ss)))
	b.ResetTimer()
	n := 0
	for n < b.N {
		p, err := UnmarshalRequest(req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(p, DecodeOptions{}, func(*sample.Sample) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
