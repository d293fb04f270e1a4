package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
)

// fleetStart is when the fleet tests' recordings start.
var fleetStart = time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()

// recordNode writes 60 s of 2 CPUs at 99 Hz as node into a new data
// directory (blocks of 30 s) and uploads its blocks to bkt as the
// recorder's shipper does: data first, meta.json last. It returns the
// number of samples.
func recordNode(t testing.TB, bkt *bucket.Bucket, node, zone string, seed uint64) int {
	return uploadSynth(t, bkt, node, zone, synth.Config{CPUs: 2, Hz: 99, Start: fleetStart, Seconds: 60, Seed: seed}, 30*time.Second)
}

// uploadSynth records cfg as node in blocks of blockDuration and uploads
// them; it returns the number of samples.
func uploadSynth(t testing.TB, bkt *bucket.Bucket, node, zone string, cfg synth.Config, blockDuration time.Duration) int {
	t.Helper()
	dir, n := storetest.RecordSynth(t, node, map[string]string{"zone": zone}, cfg, blockDuration)
	miniotest.UploadBlocks(t, bkt, node, dir)
	return n
}

type nodeInfo struct {
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels"`
	Blocks  int               `json:"blocks"`
	Samples int               `json:"samples"`
}

func nodeNames(t *testing.T, url string) []string {
	t.Helper()
	var nodes []nodeInfo
	if resp := getJSON(t, url+"/api/nodes", &nodes); resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/nodes: %d", resp.StatusCode)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return names
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeFleet runs two query services over one MinIO bucket side by
// side: both list the nodes uploaded before they started and answer the
// same; a node uploaded later shows up in both within 30 s; export reads
// the bucket too, every sample labelled with its node; /metrics and the
// logs hold no credential; with MinIO stopped a query answers 503 naming
// the bucket, and both answer again once it is back.
func TestServeFleet(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	nA := recordNode(t, bkt, "node-a", "us-east-1a", 1)
	nB := recordNode(t, bkt, "node-b", "us-east-1b", 2)
	cfg := m.WriteConfig("fleet")
	bin := buildHeatscope(t, t.TempDir())

	var urls []string
	var daemons []*daemon
	for i := range 2 {
		addr := "127.0.0.1:" + freePort(t)
		args := []string{"serve", "--objstore-config", cfg, "--listen", addr}
		if i == 1 { // the second keeps what it reads on disk too
			// Without warming, which would read node-b's small block
			// whole at start: the 503 below is of a block not read yet.
			args = append(args, "--objstore-cache-dir", t.TempDir(), "--objstore-cache-size", "64MiB", "--overview-warm-columns", "0")
		}
		d := startDaemon(t, bin, args...)
		url := "http://" + addr
		waitServing(t, d, url+"/api/nodes")
		urls, daemons = append(urls, url), append(daemons, d)
	}
	window := fmt.Sprintf("from=%d&to=%d", fleetStart/1e9, fleetStart/1e9+61)
	var answers []string
	for _, url := range urls {
		if names := nodeNames(t, url); !slices.Equal(names, []string{"node-a", "node-b"}) {
			t.Fatalf("%s: nodes %v, want node-a and node-b", url, names)
		}
		code, body := getBody(t, url+"/api/heatmap?source=node-a&node=node-a&idle=include&"+window)
		if code != http.StatusOK {
			t.Fatalf("%s heatmap: %d %s", url, code, body)
		}
		answers = append(answers, body)
	}
	if answers[0] != answers[1] {
		t.Error("the two query services answer the same heatmap differently")
	}

	// A node that uploads after both started: each lists it within 30 s.
	uploaded := time.Now()
	nC := recordNode(t, bkt, "node-c", "us-east-1b", 3)
	for _, url := range urls {
		for !slices.Contains(nodeNames(t, url), "node-c") {
			if time.Since(uploaded) > 30*time.Second {
				t.Fatalf("%s does not list node-c 30 s after its upload", url)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Logf("node-c listed by both query services %v after its upload", time.Since(uploaded).Round(100*time.Millisecond))

	// export reads the bucket: folded lines start with the node when
	// several are selected; pprof labels every sample with its node.
	folded := filepath.Join(t.TempDir(), "fleet.folded")
	if _, stderr, err := runHeatscope(bin, "export", "--objstore-config", cfg, "--label", "zone=us-east-1b", "--idle", "include",
		"--format", "folded", "-o", folded); err != nil {
		t.Fatalf("export folded: %v\n%s", err, stderr)
	}
	perNode := foldedPerNode(t, folded)
	if len(perNode) != 2 || perNode["node-b"] != int64(nB) || perNode["node-c"] != int64(nC) {
		t.Fatalf("folded export of zone us-east-1b: samples per leading frame %v, want node-b %d and node-c %d", perNode, nB, nC)
	}
	pb := filepath.Join(t.TempDir(), "fleet.pb.gz")
	if _, stderr, err := runHeatscope(bin, "export", "--objstore-config", cfg, "--node", "~^node-[ab]$", "--idle", "include", "-o", pb); err != nil {
		t.Fatalf("export pprof: %v\n%s", err, stderr)
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]int64{}
	for _, s := range p.Sample {
		byNode[strings.Join(s.Label["node"], ",")] += s.Value[0]
	}
	if len(byNode) != 2 || byNode["node-a"] != int64(nA) || byNode["node-b"] != int64(nB) {
		t.Fatalf("pprof export of ~^node-[ab]$: samples per node label %v, want node-a %d, node-b %d", byNode, nA, nB)
	}

	// Nothing shows a credential: not /metrics, not the logs.
	code, metrics := getBody(t, urls[0]+"/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, "heatscope_bucket_read_gets_total") {
		t.Fatalf("/metrics: %d, want the bucket read counters", code)
	}
	if _, cached := getBody(t, urls[1]+"/metrics"); !strings.Contains(cached, "\nheatscope_bucket_read_disk_cache_bytes ") ||
		strings.Contains(cached, "\nheatscope_bucket_read_disk_cache_bytes 0\n") {
		t.Errorf("the query service with --objstore-cache-dir keeps nothing on disk:\n%s", cached)
	}

	// MinIO stopped: a query of data not read yet fails with 503 naming
	// the bucket, promptly; back up, it answers.
	m.Stop()
	began := time.Now()
	code, body := getBody(t, urls[1]+"/api/heatmap?source=node-b&node=node-b&"+window)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, bkt.Name()) {
		t.Fatalf("heatmap with MinIO stopped: %d %s, want 503 naming %s", code, body, bkt.Name())
	}
	if took := time.Since(began); took > 45*time.Second {
		t.Errorf("the 503 took %v", took)
	}
	m.Restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body = getBody(t, urls[1]+"/api/heatmap?source=node-b&node=node-b&"+window)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("MinIO back for 30 s, the heatmap still answers %d %s", code, body)
		}
		time.Sleep(time.Second)
	}
	for _, d := range daemons {
		d.stop(t)
	}
	for _, text := range []string{metrics, daemons[0].log(), daemons[1].log(), body} {
		for _, secret := range []string{m.SecretKey, m.AccessKey} {
			if strings.Contains(text, secret) {
				t.Fatalf("a credential shows in the logs or /metrics:\n%s", text)
			}
		}
	}
}

// foldedPerNode sums a folded file's counts by the lines' first frame.
func foldedPerNode(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		first, _, _ := strings.Cut(line[:sp], ";")
		var n int64
		fmt.Sscan(line[sp+1:], &n)
		out[first] += n
	}
	return out
}

// TestServeWrongCredentials: a query service whose credentials the bucket
// refuses, or whose bucket does not exist, stops at start with an error
// naming the bucket and the operation, and never the secret.
func TestServeWrongCredentials(t *testing.T) {
	m := miniotest.Start(t)
	bin := buildHeatscope(t, t.TempDir())
	for _, c := range []struct {
		name string
		cfg  bucket.Config
		want string
	}{
		{"wrong secret", m.ConfigWith("", m.AccessKey, "not-the-secret-key-at-all", m.Bucket), "s3://" + m.Bucket},
		{"missing bucket", m.ConfigWith("", m.AccessKey, m.SecretKey, "no-such-bucket"), "s3://no-such-bucket"},
	} {
		_, stderr, err := runHeatscope(bin, "serve", "--objstore-config", m.WriteConfigOf(c.cfg), "--listen", "127.0.0.1:"+freePort(t))
		if err == nil {
			t.Fatalf("%s: serve started", c.name)
		}
		if !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "list") {
			t.Errorf("%s: %q, want an error naming %s and the list operation", c.name, stderr, c.want)
		}
		if strings.Contains(stderr, m.SecretKey) || strings.Contains(stderr, "not-the-secret-key-at-all") {
			t.Errorf("%s: the error shows the secret: %s", c.name, stderr)
		}
	}
}

// bucketReads returns a query service's bucket read counters from
// /metrics: LISTs, index reads and listings.
func bucketReads(t *testing.T, url string) (lists, indexReads, listings int64) {
	t.Helper()
	code, body := getBody(t, url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		var v float64
		if name, val, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			if _, err := fmt.Sscan(val, &v); err != nil {
				continue
			}
			switch name {
			case "heatscope_bucket_read_lists_total":
				lists = int64(v)
			case "heatscope_bucket_read_index_reads_total":
				indexReads = int64(v)
			case "heatscope_bucket_read_listings_total":
				listings = int64(v)
			}
		}
	}
	return lists, indexReads, listings
}

// TestServeReadsTheBucketIndex runs the real compactor (which rewrites the
// bucket index every 10 s) beside a query service: once the index is
// there the query service stops listing the bucket, and a node that
// uploads later is still listed within 30 s of its upload, with no LIST.
func TestServeReadsTheBucketIndex(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	recordNode(t, bkt, "node-a", "us-east-1a", 1)
	cfg := m.WriteConfig("fleet")
	bin := buildHeatscope(t, t.TempDir())
	compact := startDaemon(t, bin, "compact", "--objstore-config", cfg, "--work-dir", t.TempDir(), "--listen", "", "--interval", "1h")
	addr := "127.0.0.1:" + freePort(t)
	serve := startDaemon(t, bin, "serve", "--objstore-config", cfg, "--listen", addr)
	url := "http://" + addr
	waitServing(t, serve, url+"/api/nodes")

	// Wait for two refreshes in a row that read the index and list nothing.
	deadline := time.Now().Add(60 * time.Second)
	_, reads0, listings0 := bucketReads(t, url)
	for {
		time.Sleep(time.Second)
		_, reads, listings := bucketReads(t, url)
		if listings != listings0 {
			reads0, listings0 = reads, listings
		} else if reads >= reads0+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the query service still lists the bucket a minute after the compactor started (index reads %d, listings %d)\ncompact: %s\nserve: %s",
				reads, listings, compact.log(), serve.log())
		}
	}
	lists0, _, listings0 := bucketReads(t, url)

	uploaded := time.Now()
	recordNode(t, bkt, "node-c", "us-east-1b", 3)
	for !slices.Contains(nodeNames(t, url), "node-c") {
		if time.Since(uploaded) > 30*time.Second {
			t.Fatalf("node-c not listed 30 s after its upload\ncompact: %s\nserve: %s", compact.log(), serve.log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("node-c listed %v after its upload, through the bucket index", time.Since(uploaded).Round(100*time.Millisecond))
	if lists, _, listings := bucketReads(t, url); lists != lists0 || listings != listings0 {
		t.Fatalf("the query service listed the bucket (%d LISTs, %d listings) while the index was fresh", lists-lists0, listings-listings0)
	}
	compact.stop(t)
	serve.stop(t)
}
