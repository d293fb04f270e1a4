package otlpexport

import (
	"bytes"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/heatscope/heatscope/internal/benchcpu"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
)

// BenchmarkBatch: batch after batch of a 2-CPU node at 99 Hz over a
// 5 s interval (990 synthetic samples, containers marked; the default is 10 s), as the
// exporter makes them: encoded, marshaled and gzip-compressed. "steady"
// is a node running a few programs (100 stacks), "churn" one whose stacks
// change all the time (5000, most of them rare: a busy build machine). It
// reports the request's size, plain and compressed; -benchmem its
// garbage, which is most of what the export costs an agent near its
// memory limit; and the process's CPU time per batch, which a loaded
// machine's wall clock does not show (the collector's background work
// included).
func BenchmarkBatch(b *testing.B) {
	for _, c := range []struct {
		name              string
		stacks, processes int
	}{{"steady", 100, 5}, {"churn", 5000, 40}} {
		b.Run(c.name, func(b *testing.B) {
			g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: 1_790_000_000_000_000_000, Seconds: 5 * 60, Seed: 1, Containers: true,
				Stacks: c.stacks, Processes: c.processes})
			var ss []sample.Sample
			var s sample.Sample
			for g.Next(&s) {
				s.PeriodNs = sample.PeriodOf(99)
				ss = append(ss, s)
			}
			const perBatch = 990
			enc := otlpprofile.NewEncoder("bench", "node", 0)
			gz := newGzipWriter()
			var plain, compressed int
			b.ReportAllocs()
			reportCPU := benchcpu.PerOp(b)
			for i := range b.N {
				// Successive batches, as a recording's: the stacks of
				// one batch recur in the next.
				first := i * perBatch % (len(ss) - perBatch)
				for j := range perBatch {
					enc.Add(&ss[first+j])
				}
				body, err := enc.Request()
				if err != nil {
					b.Fatal(err)
				}
				z := bytes.NewBuffer(make([]byte, 0, len(body)/4))
				gz.Reset(z)
				gz.Write(body)
				gz.Close()
				plain, compressed = len(body), z.Len()
			}
			reportCPU()
			b.ReportMetric(float64(plain), "request-bytes")
			b.ReportMetric(float64(compressed), "gzip-bytes")
		})
	}
}

// BenchmarkExport: the whole export of a 2-CPU node's 5 s batches (990
// samples of steady stacks each) to an OTLP/gRPC endpoint in this process
// that takes each request's bytes and answers at once (the gRPC layer's
// reading, and gzip's decompression, are the endpoint's only work, counted
// here with the exporter's): Add, the cut, the marshal, the compression
// (gzip, the default, or none), the call. It reports the process's CPU
// time and Go allocation per batch.
func BenchmarkExport(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		return stream.SendMsg([]byte{})
	}))
	go srv.Serve(l)
	defer srv.Stop()
	g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: 1_790_000_000_000_000_000, Seconds: 5 * 60, Seed: 1, Containers: true,
		Stacks: 100, Processes: 5})
	var ss []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		s.PeriodNs = sample.PeriodOf(99)
		ss = append(ss, s)
	}
	for _, compression := range []string{CompressionGzip, CompressionNone} {
		b.Run(compression, func(b *testing.B) {
			x, err := New(Config{Endpoint: l.Addr().String(), Insecure: true, Compression: compression, Interval: time.Hour, Node: "node",
				Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			const perBatch = 990
			var before, after runtime.MemStats
			reportCPU := benchcpu.PerOp(b)
			runtime.ReadMemStats(&before)
			for i := range b.N {
				first := i * perBatch % (len(ss) - perBatch)
				for j := range perBatch {
					x.Add(&ss[first+j])
				}
				x.cut()
				for x.Stats().ExportedSamples < uint64((i+1)*perBatch) {
					time.Sleep(100 * time.Microsecond)
				}
			}
			reportCPU()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "alloc-bytes/op")
		})
	}
}
