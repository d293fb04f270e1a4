package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/otelcoltest"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// recordingView is what the pipeline must keep of a recording: the CPU
// time per command, the top functions and the subsecond heatmap.
type recordingView struct {
	samples  int
	commands map[string]int64 // comm -> CPU ns
	top      *query.Top
	heatmap  *query.Heatmap
}

// viewOf reads a data directory's node over r, idle samples included.
func viewOf(t *testing.T, dir, node string, r store.Range) recordingView {
	t.Helper()
	db, err := store.Open(dir, store.Options{ReadOnly: true, Node: node})
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer db.Close()
	ctx := context.Background()
	f := &store.Filter{IncludeIdle: true}
	v := recordingView{commands: map[string]int64{}}
	if _, err := query.Samples(ctx, db, r, f, func(s *sample.Sample, period int64) error {
		v.samples++
		v.commands[s.Comm] += period
		return nil
	}); err != nil {
		t.Fatalf("%s: samples: %v", dir, err)
	}
	if v.top, _, err = query.TopOf(ctx, db, r, f, query.GroupNone, query.GroupAddresses); err != nil {
		t.Fatalf("%s: top: %v", dir, err)
	}
	if v.heatmap, _, err = query.HeatmapOf(ctx, db, r, f, 50); err != nil {
		t.Fatalf("%s: heatmap: %v", dir, err)
	}
	return v
}

// spanOf is the time a data directory's samples cover.
func spanOf(t *testing.T, dir, node string) store.Range {
	t.Helper()
	db, err := store.Open(dir, store.Options{ReadOnly: true, Node: node})
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer db.Close()
	r, ok := query.Span(db.Sources(), nil)
	if !ok {
		t.Fatalf("%s holds no samples", dir)
	}
	return r
}

// countSamples is how many samples dir holds now (a receiver's WAL
// replayed), 0 when it cannot be read yet.
func countSamples(dir, node string) int {
	db, err := store.Open(dir, store.Options{ReadOnly: true, Node: node})
	if err != nil {
		return 0
	}
	defer db.Close()
	n := 0
	query.Samples(context.Background(), db, store.Range{From: math.MinInt64, To: math.MaxInt64}, &store.Filter{IncludeIdle: true},
		func(*sample.Sample, int64) error { n++; return nil })
	return n
}

// loopbackAddr is a loopback address whose port was free a moment ago.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// receiver is a running `heatscope receive`.
type receiver struct {
	t                  *testing.T
	bin, data, token   string
	grpcAddr, httpAddr string
	metricsAddr        string
	cmd                *exec.Cmd
	out                bytes.Buffer
}

func startReceiver(t *testing.T, bin, data, token string) *receiver {
	t.Helper()
	r := &receiver{t: t, bin: bin, data: data, token: token, grpcAddr: loopbackAddr(t), httpAddr: loopbackAddr(t), metricsAddr: loopbackAddr(t)}
	r.start()
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("receive's output:\n%s", r.out.String())
		}
	})
	return r
}

func (r *receiver) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, "receive", "--data", r.data, "--grpc-listen", r.grpcAddr, "--http-listen", r.httpAddr, "--block-duration", "10s",
		"--metrics-listen", r.metricsAddr)
	r.cmd.Env = append(os.Environ(), tokenEnv+"="+r.token)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	for range 200 {
		if c, err := net.Dial("tcp", r.grpcAddr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("heatscope receive does not answer on %s:\n%s", r.grpcAddr, r.out.String())
}

// stop stops it as an operator would (SIGTERM: every node's head written
// as a block).
func (r *receiver) stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	if err := r.cmd.Wait(); err != nil {
		r.t.Errorf("heatscope receive: %v", err)
	}
	r.cmd = nil
}

// waitFor waits until the receiver's node holds n samples.
func waitFor(t *testing.T, dir, node string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	got := 0
	for time.Now().Before(deadline) {
		if got = countSamples(dir, node); got >= n {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the receiver holds %d of the %d samples after %s", got, n, within)
}

// recordOTLP runs heatscope record (real BPF) as node "otlp-node" for
// seconds while the C fixture burns CPU, sending the samples with
// --otlp-endpoint to endpoint over protocol (grpc or http; plaintext,
// gzip-compressed as by default, the token as a header from a file), and
// returns its data directory and the counts of its OTLP summary line.
// during, when not nil, runs while it records.
func recordOTLP(t *testing.T, bin, dir, protocol, endpoint, token string, seconds int, during func()) (data string, exported, notExported int) {
	t.Helper()
	hotc, _ := buildFixtures(t, dir)
	c := start(t, hotc)
	defer c.Process.Kill()
	time.Sleep(200 * time.Millisecond)
	headers := filepath.Join(dir, "otlp-headers")
	if err := os.WriteFile(headers, []byte("Authorization: Bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data = filepath.Join(dir, "recorded")
	cmd := exec.Command(bin, "record", "--duration", strconv.Itoa(seconds)+"s", "--data", data, "--node", "otlp-node", "--listen", "",
		"--top", "0", "--progress", "0", "--otlp-endpoint", endpoint, "--otlp-protocol", protocol, "--otlp-insecure", "--otlp-interval", "1s",
		"--otlp-headers-file", headers)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("heatscope record: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`exported (\d+) samples; not exported: (\d+) dropped from a full queue, (\d+) refused, (\d+) left at stop`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("record printed no OTLP summary:\n%s", stderr.String())
	}
	exported, _ = strconv.Atoi(m[1])
	for _, v := range m[2:] {
		n, _ := strconv.Atoi(v)
		notExported += n
	}
	t.Logf("record: %s", m[0])
	return data, exported, notExported
}

// postOTLP sends an OTLP request file to an OTLP/HTTP endpoint.
func postOTLP(t *testing.T, url, file string) {
	t.Helper()
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

// collectorComplaints are the warnings and errors a Collector logged.
func collectorComplaints(out string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "\terror\t") || strings.Contains(line, "\twarn\t") {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestOTLPPipeline: heatscope record (real BPF, a fixture burning CPU)
// with --otlp-endpoint → a real OpenTelemetry Collector (its OTLP receiver
// and exporter, profiles gate on) → heatscope receive, both legs over
// gRPC with gzip, each side's default: the received node's CPU time per
// command, top functions and subsecond heatmap equal the recording's,
// cell for cell. A second Collector's debug exporter reads
// heatscope's export (export --format otlp) without an error.
func TestOTLPPipeline(t *testing.T) {
	bpftest.Require(t)
	otelcoltest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)

	token := "pipeline-" + strconv.Itoa(os.Getpid())
	rcv := startReceiver(t, bin, filepath.Join(dir, "received"), token)
	col := otelcoltest.Start(t, otelcoltest.Config{GRPCEndpoint: rcv.grpcAddr, Headers: map[string]string{"authorization": "Bearer " + token}, Compression: "gzip"})
	data, exported, lost := recordOTLP(t, bin, dir, "grpc", col.GRPCAddr, token, 5, nil)

	span := spanOf(t, data, "otlp-node")
	want := viewOf(t, data, "otlp-node", span)
	if want.commands["hotc"] == 0 {
		t.Fatalf("the recording holds no sample of the fixture: %v", want.commands)
	}
	if exported != want.samples || lost != 0 {
		t.Errorf("record exported %d samples and lost %d; it recorded %d", exported, lost, want.samples)
	}
	received := filepath.Join(rcv.data, "otlp-node")
	waitFor(t, received, "otlp-node", want.samples, time.Minute)
	metrics := scrape(t, "http://"+rcv.metricsAddr+"/metrics", "Authorization", "Bearer "+rcv.token)
	if m := metricSum(metrics, "heatscope_otlp_receive_samples_total"); m != float64(want.samples) {
		t.Errorf("heatscope_otlp_receive_samples_total %v, want %d", m, want.samples)
	}
	col.Stop() // first, so that its exporter does not log the receiver gone
	rcv.stop()
	got := viewOf(t, received, "otlp-node", span)
	if got.samples != want.samples || !reflect.DeepEqual(got.commands, want.commands) {
		t.Errorf("received %d samples, CPU ns per command %v; recorded %d, %v", got.samples, got.commands, want.samples, want.commands)
	}
	if !reflect.DeepEqual(got.top, want.top) {
		t.Errorf("top functions differ:\n got  %+v\n want %+v", head(got.top.Functions, 5), head(want.top.Functions, 5))
	}
	if !reflect.DeepEqual(got.heatmap, want.heatmap) {
		t.Errorf("heatmaps differ: %s", heatmapDiff(got.heatmap, want.heatmap))
	}
	if entries, _ := os.ReadDir(rcv.data); len(entries) != 1 {
		t.Errorf("the receiver made %d node directories, want 1 (otlp-node)", len(entries))
	}
	for _, line := range collectorComplaints(col.Output()) {
		t.Errorf("the Collector logged: %s", line)
	}

	// heatscope's export file, read by a Collector's debug exporter.
	request := filepath.Join(dir, "request.pb")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--format", "otlp", "--idle", "include", "-o", request); err != nil {
		t.Fatalf("heatscope export --format otlp: %v\n%s", err, stderr)
	}
	debug := otelcoltest.Start(t, otelcoltest.Config{})
	postOTLP(t, "http://"+debug.HTTPAddr+otelcoltest.HTTPPath, request)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(debug.Output(), "hot_c_function") && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	out := debug.Output()
	for _, w := range []string{"ResourceProfiles #0", "host.name: Str(otlp-node)", "thread.name: Str(hotc)", "hot_c_function"} {
		if !strings.Contains(out, w) {
			t.Errorf("the Collector's debug output of heatscope's export lacks %q", w)
		}
	}
	for _, line := range collectorComplaints(out) {
		t.Errorf("the Collector logged: %s", line)
	}
}

// TestOTLPCollectorRestart: the Collector between heatscope record (over
// OTLP/HTTP, gzip) and heatscope receive (OTLP/gRPC, gzip) stopped for 4 s
// mid-run and started again on the same ports: record goes on sampling
// through the outage (every second of the run holds samples of the
// fixture), its exporter retries, and every sample it did not export is
// counted: the receiver holds exactly what record says it exported.
func TestOTLPCollectorRestart(t *testing.T) {
	bpftest.Require(t)
	otelcoltest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	rcv := startReceiver(t, bin, filepath.Join(dir, "received"), "tok")
	col := otelcoltest.Start(t, otelcoltest.Config{GRPCEndpoint: rcv.grpcAddr, Headers: map[string]string{"authorization": "Bearer tok"}, Compression: "gzip"})
	data, exported, lost := recordOTLP(t, bin, dir, "http", col.HTTPAddr, "tok", 12, func() {
		time.Sleep(3 * time.Second)
		col.Stop()
		time.Sleep(4 * time.Second)
		col.Restart()
	})
	span := spanOf(t, data, "otlp-node")
	want := viewOf(t, data, "otlp-node", span)
	if exported+lost != want.samples {
		t.Errorf("record exported %d samples and counted %d not exported, of %d recorded", exported, lost, want.samples)
	}
	for c, v := range want.heatmap.Values {
		if c > 0 && c < len(want.heatmap.Values)-1 && slices.Max(v) == 0 {
			t.Errorf("second %d of the recording holds no sample: recording stopped while the Collector was down", c)
		}
	}
	received := filepath.Join(rcv.data, "otlp-node")
	waitFor(t, received, "otlp-node", exported, time.Minute)
	col.Stop()
	rcv.stop()
	if n := countSamples(received, "otlp-node"); n != exported {
		t.Errorf("the receiver holds %d samples; record exported %d", n, exported)
	}
}

// TestOTLPReceiverRestart: heatscope's receiver stopped while a Collector
// forwards to it (OTLP/HTTP, gzip; record sends to the Collector over
// gRPC, gzip) and started again on the same data directory: the
// Collector's exporter retries, and every sample arrives once.
func TestOTLPReceiverRestart(t *testing.T) {
	bpftest.Require(t)
	otelcoltest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	rcv := startReceiver(t, bin, filepath.Join(dir, "received"), "tok")
	col := otelcoltest.Start(t, otelcoltest.Config{HTTPEndpoint: "http://" + rcv.httpAddr, Headers: map[string]string{"authorization": "Bearer tok"}, Compression: "gzip"})
	data, exported, lost := recordOTLP(t, bin, dir, "grpc", col.GRPCAddr, "tok", 8, func() {
		time.Sleep(2 * time.Second)
		rcv.stop()
		time.Sleep(3 * time.Second)
		rcv.start()
	})
	span := spanOf(t, data, "otlp-node")
	want := viewOf(t, data, "otlp-node", span)
	if exported != want.samples || lost != 0 {
		t.Errorf("record exported %d samples and lost %d; it recorded %d", exported, lost, want.samples)
	}
	received := filepath.Join(rcv.data, "otlp-node")
	waitFor(t, received, "otlp-node", want.samples, time.Minute)
	col.Stop()
	rcv.stop()
	got := viewOf(t, received, "otlp-node", span)
	if got.samples != want.samples || !reflect.DeepEqual(got.heatmap, want.heatmap) {
		t.Errorf("after the restart: %d samples (heatmaps equal: %v), want %d", got.samples, reflect.DeepEqual(got.heatmap, want.heatmap), want.samples)
	}
	if !strings.Contains(strings.ToLower(col.Output()), "retry") {
		t.Errorf("the Collector's output says nothing of retrying the export")
	}
}

func head[T any](s []T, n int) []T { return s[:min(n, len(s))] }

// heatmapDiff names the first cell where two heatmaps differ.
func heatmapDiff(got, want *query.Heatmap) string {
	if len(got.Values) != len(want.Values) || got.Start != want.Start {
		return fmt.Sprintf("%d columns from %v, want %d from %v", len(got.Values), got.Start, len(want.Values), want.Start)
	}
	for c := range want.Values {
		if !slices.Equal(got.Values[c], want.Values[c]) {
			return fmt.Sprintf("column %d: %v, want %v", c, got.Values[c], want.Values[c])
		}
		if !slices.Equal(got.CPU[c], want.CPU[c]) {
			return fmt.Sprintf("column %d CPU: %v, want %v", c, got.CPU[c], want.CPU[c])
		}
	}
	return "(the cells agree; another field differs)"
}
