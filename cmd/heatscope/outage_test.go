package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// uploadEvents uploads n kernel-log events of node, as its shipper does.
func uploadEvents(t *testing.T, bkt *bucket.Bucket, node string, n int) {
	t.Helper()
	var evs []events.Event
	for i := range n {
		evs = append(evs, events.Event{Time: fleetStart + int64(i)*1e9, Source: "kmsg", Severity: events.Warning, Text: "ena 0000:00:05.0 eth0: Device reset"})
	}
	miniotest.UploadEvents(t, bkt, node, evs)
}

// answer is one HTTP answer: its status, Warning headers and body.
type answer struct {
	code     int
	warnings []string
	body     string
	took     time.Duration
}

func ask(t *testing.T, url string) answer {
	t.Helper()
	began := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return answer{resp.StatusCode, resp.Header.Values("Warning"), b.String(), time.Since(began)}
}

// eventCount returns the events of an /api/events answer.
func eventCount(t *testing.T, a answer) int {
	t.Helper()
	var v struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("events answer %q: %v", a.body, err)
	}
	return len(v.Events)
}

// awaitAnswer asks url until ok says the answer is the one awaited, for
// at most limit.
func awaitAnswer(t *testing.T, url string, limit time.Duration, what string, ok func(answer) bool) answer {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		a := ask(t, url)
		if ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %d %q (warnings %q) after %v", what, a.code, a.body, a.warnings, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeBucketOutage stops a query service's MinIO (SIGSTOP: its port
// still accepts connections, nothing answers) while it serves: answers
// from what it read before carry a Warning saying since when they may be
// stale, events come from the segments read before (not an empty list),
// a query of what it never read fails with a 503 naming the bucket once,
// within about --objstore-timeout (the figure is logged), and /healthz
// says it is degraded. Once MinIO continues, all of it is served again.
func TestServeBucketOutage(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	recordNode(t, bkt, "node-a", "z", 1)
	recordNode(t, bkt, "node-b", "z", 2)
	uploadEvents(t, bkt, "node-a", 3)
	cfg := m.WriteConfig("fleet")
	bin := buildHeatscope(t, t.TempDir())
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--objstore-config", cfg, "--listen", addr, "--overview-warm-columns", "0")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	window := fmt.Sprintf("idle=include&from=%d&to=%d", fleetStart/1e9, fleetStart/1e9+61)
	nodeA := url + "/api/heatmap?source=node-a&node=node-a&" + window
	nodeB := url + "/api/heatmap?source=node-b&node=node-b&" + window
	before := ask(t, nodeA)
	if before.code != http.StatusOK || len(before.warnings) != 0 {
		t.Fatalf("node-a's heatmap: %d %v %.200s", before.code, before.warnings, before.body)
	}
	if a := ask(t, url+"/api/events"); a.code != http.StatusOK || eventCount(t, a) != 3 {
		t.Fatalf("events: %d %.300s, want 200 and 3 events", a.code, a.body)
	}

	m.Pause()
	paused := time.Now()
	// The next refresh (every 10 s) finds the bucket silent.
	h := awaitAnswer(t, url+"/healthz", 60*time.Second, "/healthz during the outage", func(a answer) bool { return strings.Contains(a.body, "degraded") })
	t.Logf("/healthz %v after the bucket stopped: %d %q", time.Since(paused).Round(100*time.Millisecond), h.code, h.body)
	if h.code != http.StatusOK || !strings.Contains(h.body, "has not answered since") {
		t.Fatalf("/healthz during the outage: %d %q, want 200 (ready: it serves what it read) saying since when", h.code, h.body)
	}
	if v := metricSum(scrape(t, url+"/metrics"), "heatscope_bucket_read_unanswered_seconds"); v <= 0 {
		t.Fatalf("heatscope_bucket_read_unanswered_seconds %v during the outage, want how long", v)
	}
	cached := ask(t, nodeA)
	if cached.code != http.StatusOK || cached.body != before.body {
		t.Fatalf("node-a's heatmap, read before, during the outage: %d, want 200 and the same answer", cached.code)
	}
	stale := strings.Join(cached.warnings, "\n")
	if !strings.Contains(stale, "s3://"+m.Bucket+"/fleet has not answered since") || !strings.Contains(stale, "may be missing") {
		t.Fatalf("an answer from what was read before carries %q, want a Warning saying since when it may be stale", cached.warnings)
	}
	evs := ask(t, url+"/api/events")
	if evs.code != http.StatusOK || eventCount(t, evs) != 3 || !strings.Contains(strings.Join(evs.warnings, "\n"), "has not answered since") {
		t.Fatalf("events during the outage: %d %v %.300s, want the 3 events read before and a Warning", evs.code, evs.warnings, evs.body)
	}
	// A query of blocks never read: a 503 within about the bucket timeout.
	var took []time.Duration
	for range 5 {
		a := ask(t, nodeB)
		if a.code != http.StatusServiceUnavailable {
			t.Fatalf("node-b's heatmap, never read, during the outage: %d %.300s, want 503", a.code, a.body)
		}
		if n := strings.Count(a.body, "s3://"+m.Bucket+"/fleet"); n != 1 {
			t.Fatalf("the 503 names the bucket %d times, want once: %s", n, a.body)
		}
		took = append(took, a.took)
	}
	slices.Sort(took)
	t.Logf("uncached query under a stopped bucket: 503 in %v (median of %d: %v; --objstore-timeout %v)",
		took[len(took)/2].Round(10*time.Millisecond), len(took), took, defaultBucketTimeout)
	if took[len(took)/2] > 2*defaultBucketTimeout {
		t.Fatalf("uncached queries waited %v (median) for their 503, more than twice the bucket timeout %v", took[len(took)/2], defaultBucketTimeout)
	}

	m.Resume()
	awaitAnswer(t, url+"/healthz", 60*time.Second, "/healthz after the outage", func(a answer) bool { return a.code == http.StatusOK && a.body == "ok\n" })
	if a := ask(t, nodeB); a.code != http.StatusOK || len(a.warnings) != 0 {
		t.Fatalf("node-b's heatmap after the outage: %d %v %.200s", a.code, a.warnings, a.body)
	}
	if a := ask(t, nodeA); a.code != http.StatusOK || len(a.warnings) != 0 {
		t.Fatalf("node-a's heatmap after the outage: %d %v", a.code, a.warnings)
	}
	families := scrape(t, url+"/metrics")
	if v, listed := metricSum(families, "heatscope_bucket_read_unanswered_seconds"), metricSum(families, "heatscope_bucket_read_last_listing_timestamp_seconds"); v != 0 || listed < float64(paused.Unix()) {
		t.Fatalf("after the outage: unanswered %v s, last listing at %v; want 0 and after the outage began (%d)", v, listed, paused.Unix())
	}
}

// TestServeStartsDuringOutage starts a query service while its MinIO does
// not answer: it starts (as a Kubernetes Deployment expects), answers 503
// with /healthz not ready and the reason, and serves as soon as MinIO is
// back. A refusal (wrong credentials, no bucket) still stops it at start
// (TestServeWrongCredentials).
func TestServeStartsDuringOutage(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	n := recordNode(t, bkt, "node-a", "z", 1)
	uploadEvents(t, bkt, "node-a", 2)
	cfg := m.WriteConfig("fleet")
	bin := buildHeatscope(t, t.TempDir())
	m.Pause()
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--objstore-config", cfg, "--listen", addr, "--objstore-timeout", "1s")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	h := ask(t, url+"/healthz")
	name := "s3://" + m.Bucket + "/fleet"
	if h.code != http.StatusServiceUnavailable || !strings.HasPrefix(h.body, "not ready: storage unavailable: bucket "+name+": list") ||
		!strings.Contains(h.body, "nothing was read from it yet") || strings.Count(h.body, name) != 1 {
		t.Fatalf("/healthz while the bucket never answered: %d %q, want 503 not ready with the reason, the bucket named once", h.code, h.body)
	}
	for _, path := range []string{"/api/nodes", "/api/events", "/api/fleet/events"} {
		if a := ask(t, url+path); a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "nothing was read from it yet") || strings.Count(a.body, name) != 1 {
			t.Fatalf("%s while the bucket never answered: %d %q, want 503 saying why, the bucket named once", path, a.code, a.body)
		}
	}
	m.Resume()
	resumed := time.Now()
	awaitAnswer(t, url+"/api/nodes", 60*time.Second, "nodes after the bucket came back", func(a answer) bool {
		return a.code == http.StatusOK && strings.Contains(a.body, fmt.Sprintf(`"samples":%d`, n))
	})
	t.Logf("serving %v after the bucket came back", time.Since(resumed).Round(100*time.Millisecond))
	// The refresh that lists the blocks reads the events next.
	awaitAnswer(t, url+"/api/events", 30*time.Second, "events after the bucket came back", func(a answer) bool {
		return a.code == http.StatusOK && eventCount(t, a) == 2
	})
	if h := ask(t, url+"/healthz"); h.code != http.StatusOK || h.body != "ok\n" {
		t.Fatalf("/healthz after the bucket came back: %d %q", h.code, h.body)
	}
}
