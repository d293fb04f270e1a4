package main

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
)

// BenchmarkServeNodeHeatmap measures the query service over a real MinIO:
// three nodes upload 10 minutes of 8 CPUs at 99 Hz each (2-minute blocks),
// then a fresh `heatscope serve --objstore-config` answers one node's
// 10-minute heatmap: cold (its first query: listing done, no block read
// yet) and warm (the median of 7 more). It reports both in ms and the
// service's RSS after them (from its /metrics).
func BenchmarkServeNodeHeatmap(b *testing.B) {
	m := miniotest.Start(b)
	bkt := m.Open("bench")
	for i, n := range []string{"node-a", "node-b", "node-c"} {
		uploadSynth(b, bkt, n, "us-east-1a", synth.Config{CPUs: 8, Hz: 99, Start: fleetStart, Seconds: 600, Seed: uint64(i + 1)}, 2*time.Minute)
	}
	cfg := m.WriteConfig("bench")
	bin := buildHeatscope(b, b.TempDir())
	window := fmt.Sprintf("source=node-b&node=node-b&from=%d&to=%d", fleetStart/1e9, fleetStart/1e9+600)
	var colds, warms, rss []float64
	for range b.N {
		addr := "127.0.0.1:" + freePort(b)
		d := startDaemon(b, bin, "serve", "--objstore-config", cfg, "--listen", addr)
		url := "http://" + addr
		waitServing(b, d, url+"/api/nodes")
		query := func() time.Duration {
			began := time.Now()
			resp, err := http.Get(url + "/api/heatmap?" + window)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("heatmap: %v %v", err, resp)
			}
			resp.Body.Close()
			return time.Since(began)
		}
		colds = append(colds, ms(query()))
		var w []float64
		for range 7 {
			w = append(w, ms(query()))
		}
		slices.Sort(w)
		warms = append(warms, w[len(w)/2])
		rss = append(rss, residentMB(b, url))
		d.cmd.Process.Kill()
	}
	b.ReportMetric(median(colds), "cold-ms")
	b.ReportMetric(median(warms), "warm-ms")
	b.ReportMetric(median(rss), "rss-MB")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// residentMB reads process_resident_memory_bytes from a server's /metrics.
func residentMB(b *testing.B, url string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f / 1e6
		}
	}
	b.Fatal("no process_resident_memory_bytes in /metrics")
	return 0
}
