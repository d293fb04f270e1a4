package main

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/otlpreceive"
	"github.com/heatscope/heatscope/sample"
)

// TestReceiveBucketDown: heatscope receive shipping to a real MinIO that
// stops. Within seconds its log names the bucket,
// heatscope_otlp_receive_bucket_up is 0 and an accepted request's answer
// (its partial success) says its samples are stored and wait for the
// bucket; MinIO back, the log says so and the metric is 1 again. Before,
// the receiver said nothing for about 66 s (until the node's lease went
// unrenewed), and its answers and metrics never.
func TestReceiveBucketDown(t *testing.T) {
	srv := miniotest.Start(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	httpAddr, metricsAddr := loopbackAddr(t), loopbackAddr(t)
	d := startDaemon(t, bin, "receive", "--data", filepath.Join(dir, "received"), "--grpc-listen", "", "--http-listen", httpAddr,
		"--metrics-listen", metricsAddr, "--objstore-config", srv.WriteConfig("fleet"))
	metrics := "http://" + metricsAddr + "/metrics"
	waitServing(t, d, metrics)

	seed := uint64(0)
	send := func() pprofileotlp.ExportResponse {
		t.Helper()
		seed++
		g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: 1, Seed: seed})
		enc := otlpprofile.NewEncoder("test", "bucket-node", sample.PeriodOf(99))
		g.Feed(func(s *sample.Sample) error { enc.Add(s); return nil })
		body, err := enc.Request()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+httpAddr+otlpreceive.HTTPPath, "application/x-protobuf", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out := pprofileotlp.NewExportResponse()
		if resp.StatusCode != http.StatusOK || out.UnmarshalProto(b) != nil {
			t.Fatalf("POST: %s %q\n%s", resp.Status, b, d.log())
		}
		return out
	}
	// waitUntil polls cond for up to 30 s: the receiver asks the bucket
	// every 5 s.
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s, %s\n%s", what, d.log())
			}
		}
	}

	if ps := send().PartialSuccess(); ps.ErrorMessage() != "" || ps.RejectedProfiles() != 0 {
		t.Fatalf("the bucket answers, yet the partial success says %d %q", ps.RejectedProfiles(), ps.ErrorMessage())
	}
	if v := metricSum(scrape(t, metrics), "heatscope_otlp_receive_bucket_up"); v != 1 {
		t.Fatalf("heatscope_otlp_receive_bucket_up %v while the bucket answers", v)
	}

	srv.Stop()
	waitUntil("the log does not say the bucket does not answer", func() bool { return strings.Contains(d.log(), "the bucket does not answer") })
	if l := d.log(); !strings.Contains(l, srv.Bucket) {
		t.Errorf("the log does not name the bucket %s:\n%s", srv.Bucket, l)
	}
	if v := metricSum(scrape(t, metrics), "heatscope_otlp_receive_bucket_up"); v != 0 {
		t.Errorf("heatscope_otlp_receive_bucket_up %v while the bucket is down, want 0", v)
	}
	ps := send().PartialSuccess()
	if ps.RejectedProfiles() != 0 || !strings.Contains(ps.ErrorMessage(), "not shipped yet") || !strings.Contains(ps.ErrorMessage(), srv.Bucket) {
		t.Errorf("an answer while the bucket is down: rejected %d, %q; want nothing rejected and the bucket named", ps.RejectedProfiles(), ps.ErrorMessage())
	}

	srv.Restart()
	waitUntil("the log does not say the bucket answers again", func() bool { return strings.Contains(d.log(), "the bucket answers again") })
	if v := metricSum(scrape(t, metrics), "heatscope_otlp_receive_bucket_up"); v != 1 {
		t.Errorf("heatscope_otlp_receive_bucket_up %v once the bucket is back, want 1", v)
	}
	if ps := send().PartialSuccess(); ps.ErrorMessage() != "" {
		t.Errorf("the bucket is back, yet the partial success says %q", ps.ErrorMessage())
	}
	d.stop(t)
}
