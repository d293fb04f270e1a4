package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/store"
)

// scrape reads url (a /metrics endpoint) with the Prometheus text parser.
func scrape(t *testing.T, url string, headers ...string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return families
}

// metricSum sums a family's counters, gauges or histogram counts over the
// series whose labels include want (name, value pairs); -1 if it is missing.
func metricSum(families map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f, ok := families[name]
	if !ok {
		return -1
	}
	sum := 0.0
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			match = match && labels[want[i]] == want[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// recordFixture starts a recorder of the whole machine for 30 s, in 2 s
// blocks, beside the hot C fixture, and returns it once it serves, with
// its URL.
func recordFixture(t *testing.T) (*daemon, string) {
	t.Helper()
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	start(t, hotc)
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", filepath.Join(dir, "data"), "--duration", "30s", "--listen", addr,
		"--progress", "0", "--block-duration", "2s")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	return d, url
}

// TestRecordMetrics scrapes a recorder's /metrics twice while it records a
// C fixture and checks that the figures are there and move.
func TestRecordMetrics(t *testing.T) {
	d, url := recordFixture(t)
	if code, body := httpGet(t, url+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz while recording: %d %q", code, body)
	}
	time.Sleep(2 * time.Second)
	first := scrape(t, url+"/metrics")
	getJSON(t, url+"/api/sources", nil)
	getJSON(t, url+"/api/timeline?from=-1m&to=-0s&step=100ms", nil)
	getJSON(t, url+"/api/timeline?step=nonsense", nil) // a 400
	time.Sleep(3 * time.Second)
	second := scrape(t, url+"/metrics")
	d.stop(t)

	for _, name := range []string{"heatscope_samples_received_total", "heatscope_samples_total",
		"heatscope_store_samples_appended_total", "heatscope_frames_total", "heatscope_symbolizer_binary_cache_misses_total",
		"heatscope_symbolizer_maps_reads_total", "heatscope_processes_tracked", "heatscope_symbol_cache_bytes", "process_cpu_seconds_total",
		"process_resident_memory_bytes"} {
		if v := metricSum(first, name); v <= 0 {
			t.Errorf("%s = %v after 2 s of recording, want > 0", name, v)
		}
	}
	// (Not process_cpu_seconds_total: the agent's 3 s in steady state are
	// about 10 ms of CPU, the granularity of the kernel's CPU times.)
	for _, name := range []string{"heatscope_samples_received_total", "heatscope_samples_total",
		"heatscope_store_samples_appended_total"} {
		if a, b := metricSum(first, name), metricSum(second, name); b <= a {
			t.Errorf("%s did not move in 3 s of recording: %v -> %v", name, a, b)
		}
	}
	// Samples are counted per CPU; at 99 Hz with one CPU kept busy, 5 s
	// give hundreds.
	if n := len(second["heatscope_samples_total"].GetMetric()); n < 1 {
		t.Errorf("heatscope_samples_total has %d per-CPU series", n)
	}
	if v := metricSum(second, "heatscope_samples_received_total"); v < 200 {
		t.Errorf("%v samples received in 5 s with a busy CPU, want >= 200", v)
	}
	for name, want := range map[string]float64{"heatscope_samples_dropped_total": 0, "heatscope_record_decode_errors_total": 0,
		"heatscope_sampling_frequency_hertz": 99, "heatscope_store_samples_lost_total": 0,
		"heatscope_kmsg_events_enabled": 1} { // root reads /dev/kmsg
		if v := metricSum(second, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	// The head is cut every 2 s: blocks and their bytes show up.
	if v := metricSum(second, "heatscope_store_block_bytes"); v <= 0 {
		t.Errorf("heatscope_store_block_bytes = %v after 5 s with 2 s blocks", v)
	}
	if r := metricSum(second, "heatscope_frames_unknown_ratio"); r < 0 || r > 0.5 {
		t.Errorf("heatscope_frames_unknown_ratio = %v, want within [0, 0.5]", r)
	}
	if f := metricSum(second, "heatscope_ring_buffer_fill_ratio"); f < 0 || f > 1 {
		t.Errorf("heatscope_ring_buffer_fill_ratio = %v", f)
	}
	for _, c := range []struct{ endpoint, code string }{{"/api/sources", "200"}, {"/api/timeline", "200"}, {"/api/timeline", "400"}} {
		if n := metricSum(second, "heatscope_query_duration_seconds", "endpoint", c.endpoint, "code", c.code); n != 1 {
			t.Errorf("query latency histogram of %s (%s) counts %v requests, want 1", c.endpoint, c.code, n)
		}
	}
}

// TestRecordKeepsTimelineStepsInTheOverviewCells: record's timelines of
// every thread keep their blocks' per-CPU steps in its fleet overview's
// cells (store.Reader.KeepStepsIn), one budget with the zooms' steps
// (docs/design.md, "One budget for the timelines' steps and the zooms'"):
// the cells' step bytes in /metrics are none before a timeline at 10 s
// steps and some after it, where a store keeping its own cache leaves
// them none.
func TestRecordKeepsTimelineStepsInTheOverviewCells(t *testing.T) {
	d, url := recordFixture(t)
	defer d.stop(t)
	// Blocks cut (every 2 s), each with its per-CPU summary.
	for deadline := time.Now().Add(20 * time.Second); metricSum(scrape(t, url+"/metrics"), "heatscope_store_blocks") < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 2 blocks cut in 20 s of 2 s blocks\n%s", d.log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	stepBytes := func() float64 {
		t.Helper()
		return metricSum(scrape(t, url+"/metrics"), "heatscope_overview_step_cells_bytes")
	}
	if b := stepBytes(); b != 0 {
		t.Fatalf("the overview's step cells hold %v bytes before any timeline or zoom", b)
	}
	// Every thread at 10 s steps: answered from the blocks' summaries,
	// each block's steps kept where the Reader keeps them.
	var tl struct {
		CPU []float64 `json:"cpu"`
	}
	getJSON(t, url+"/api/timeline?step=10s", &tl)
	if len(tl.CPU) == 0 {
		t.Fatalf("the timeline has no steps: %+v", tl)
	}
	if b := stepBytes(); b <= 0 {
		t.Errorf("the overview's step cells hold %v bytes after a timeline of every thread at 10 s steps: its steps were kept elsewhere", b)
	}
}

// TestOverheadGuard records with a budget no agent can meet and checks
// that the guard halves the frequency, that the metric, the progress line
// and the log say so, and that the blocks written on each side of the
// change state their own sampling period.
func TestOverheadGuard(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	fixture := start(t, hotc)
	addr := "127.0.0.1:" + freePort(t)
	data := filepath.Join(dir, "data")
	d := startDaemon(t, bin, "record", "--data", data, "--duration", "60s", "--listen", addr,
		"--frequency", "400", "--max-cpu", "0.001", "--progress", "1s")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	if v := metricSum(scrape(t, url+"/metrics"), "heatscope_sampling_frequency_hertz"); v != 400 {
		t.Fatalf("frequency at start = %v, want 400", v)
	}
	// The guard decides every 10 s. With the table walk on, its first
	// window over the budget gives up loading new unwind tables and keeps
	// the rate; the next one halves it.
	deadline := time.Now().Add(45 * time.Second)
	var hz, changes, sheds float64
	for time.Now().Before(deadline) {
		m := scrape(t, url+"/metrics")
		hz, changes = metricSum(m, "heatscope_sampling_frequency_hertz"), metricSum(m, "heatscope_sampling_frequency_changes_total")
		sheds = metricSum(m, "heatscope_guard_work_sheds_total")
		if hz < 400 {
			if shedNow := metricSum(m, "heatscope_guard_work_shed"); shedNow != sheds {
				t.Errorf("heatscope_guard_work_shed = %v with %v sheds, want them equal", shedNow, sheds)
			}
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if hz != 200 || changes != 1 {
		t.Fatalf("after the first windows: %v Hz, %v changes; want 200 Hz, 1 change\n%s", hz, changes, d.log())
	}
	if !strings.Contains(d.log(), "the rest ") || !strings.Contains(d.log(), "(samples ") && !strings.Contains(d.log(), ", samples ") {
		t.Errorf("the guard's reasons do not say what the cost was made of\n%s", d.log())
	}
	m := scrape(t, url+"/metrics")
	var parts []string
	if f := m["heatscope_agent_work_cpu_seconds_total"]; f != nil {
		for _, mm := range f.Metric {
			for _, l := range mm.Label {
				parts = append(parts, l.GetValue())
			}
		}
	}
	if slices.Sort(parts); !slices.Equal(parts, []string{"BPF sampler", "new processes", "samples", "symbol tables", "the store", "unwind tables"}) {
		t.Errorf("/metrics has the agent's CPU time by part for %q, want BPF sampler, new processes, samples, symbol tables, the store, unwind tables", parts)
	}
	if v := metricSum(m, "heatscope_agent_work_cpu_seconds_total", "part", "samples"); !(v > 0) {
		t.Errorf("the agent's CPU time on its samples is %v: it read thousands", v)
	}
	if v := metricSum(m, "heatscope_agent_work_cpu_seconds_total", "part", "symbol tables"); !(v > 0) {
		t.Errorf("the agent's CPU time on symbol tables is %v: it read the fixture's and its own", v)
	}
	if v := metricSum(m, "heatscope_guard_rate_ceiling_hertz"); v != 400 {
		t.Errorf("heatscope_guard_rate_ceiling_hertz = %v after the cut from 400 Hz, want 400", v)
	}
	tableWalk := !strings.Contains(d.log(), "user stacks are walked with frame pointers")
	if want := map[bool]float64{true: 1}[tableWalk]; sheds != want {
		t.Errorf("the guard gave up work %v times before halving, want %v (table walk %v)\n%s", sheds, want, tableWalk, d.log())
	}
	// The episode of changes is one system event, written when it ends:
	// here when the recording stops, the rate still lowered. The work
	// given up is one at once.
	var evs struct {
		Events []struct{ Text string }
	}
	getJSON(t, url+"/api/events?source=heatscope&kind=overhead-guard", &evs)
	for _, e := range evs.Events {
		if !strings.HasPrefix(e.Text, "overhead guard: gave up unwind tables") {
			t.Errorf("an episode still under way was written as an event: %+v", e)
		}
	}
	if len(evs.Events) != int(sheds) {
		t.Errorf("%d events of the guard before its episode ended, want %v for the work given up: %+v", len(evs.Events), sheds, evs.Events)
	}
	time.Sleep(1500 * time.Millisecond) // a progress line at the new frequency
	// A second change (the budget cannot be met): the episode has two.
	for deadline := time.Now().Add(25 * time.Second); changes < 2 && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		changes = metricSum(scrape(t, url+"/metrics"), "heatscope_sampling_frequency_changes_total")
	}
	if changes < 2 {
		t.Errorf("%v changes 35 s after the first window, want a second halving", changes)
	}
	d.stop(t)
	log := d.log()
	if !strings.Contains(log, `msg="sampling frequency changed" from_hz=400 to_hz=200`) || !strings.Contains(log, "over the 0.001% budget") {
		t.Errorf("no log line for the change:\n%s", log)
	}
	logged := strings.Count(log, `msg="sampling frequency changed"`)
	// The summary says the rate was not held, and where to read why.
	if want := fmt.Sprintf("sampling frequency: 400 Hz asked; the overhead guard (--max-cpu 0.001) changed it %d times, lowest ", logged); !strings.Contains(log, want) ||
		!strings.Contains(log, "Hz at the stop: fewer samples were taken") {
		t.Errorf("the summary does not say %q ... Hz at the stop:\n%s", want, log)
	}
	db, err := store.Open(data, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := db.Events(store.Range{From: 0, To: math.MaxInt64}, store.EventFilter{Kinds: []string{"overhead-guard"}}, 100)
	db.Close()
	var guardEvents []events.Event
	for _, e := range stored {
		if e.Labels["shed"] == "" {
			guardEvents = append(guardEvents, e)
		}
	}
	if len(guardEvents) != 1 {
		t.Fatalf("%d changes logged, %d overhead-guard events, want one for the episode: %+v", logged, len(guardEvents), guardEvents)
	}
	e := guardEvents[0]
	lowest := e.Labels["lowest_hz"]
	if e.Severity != events.Warning || e.Source != "heatscope" || e.Labels["changes"] != strconv.Itoa(logged) || e.Labels["from_hz"] != "400" ||
		e.Labels["to_hz"] != lowest || !strings.Contains(e.Text, fmt.Sprintf("sampling frequency 400 Hz -> %s Hz: ", lowest)) ||
		!strings.Contains(e.Text, "until the recording stopped; first change: agent CPU") {
		t.Errorf("the episode's event %+v; want a warning from 400 Hz down to its lowest rate, %d changes, until the stop", e, logged)
	}
	if !strings.Contains(log, "stack errors, 200 Hz") {
		t.Errorf("no progress line at 200 Hz:\n%s", log)
	}
	periods := map[int64]bool{}
	var cpuNs int64 // what the blocks' samples weigh, each at its block's period
	blocks, err := store.LocalBlocks(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		meta, _, err := b.ReadMeta()
		if err != nil {
			t.Fatal(err)
		}
		periods[meta.PeriodNs] = true
		cpuNs += int64(meta.Samples) * meta.PeriodNs
	}
	if !periods[1e9/400] || !periods[1e9/200] {
		t.Errorf("blocks state periods %v, want both %d (400 Hz) and %d (200 Hz)", periods, int64(1e9/400), int64(1e9/200))
	}
	// The summary counts the blocks written, and says how to look at them.
	if m := regexp.MustCompile(`data directory \S+: (\d+) blocks, (\d+) bytes`).FindStringSubmatch(log); m == nil || m[1] != strconv.Itoa(len(blocks)) || m[2] == "0" {
		t.Errorf("summary %q, want the %d blocks written", m, len(blocks))
	}
	if !strings.Contains(log, "heatscope serve --data "+data) {
		t.Errorf("no line saying how to serve what was recorded:\n%s", log)
	}
	// Exports across the change weigh each sample by its own period: the
	// whole recording adds up to the blocks' samples times their periods,
	// and the single-threaded fixture never takes more than one CPU.
	all := filepath.Join(dir, "all.pb.gz")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--idle", "include", "-o", all); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	var total int64
	for _, s := range readProfile(t, all).Sample {
		total += s.Value[1]
	}
	if total != cpuNs {
		t.Errorf("export of the whole recording: %d ns of CPU, its blocks' samples weigh %d ns", total, cpuNs)
	}
	// The fixture by its pid: another test's hotc (a CI run beside this
	// one) is sampled too, and two of them take more than a CPU.
	hot := filepath.Join(dir, "hotc.pb.gz")
	pid := strconv.Itoa(fixture.Process.Pid)
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--pid", pid, "-o", hot); err != nil {
		t.Fatalf("export --pid %s: %v\n%s", pid, err, stderr)
	}
	p := readProfile(t, hot)
	total = 0
	for _, s := range p.Sample {
		total += s.Value[1]
	}
	if share := float64(total) / float64(p.DurationNanos); share > 1.02 || total == 0 {
		t.Errorf("export --pid %s: %.1f%% of a CPU (%d ns in %d ns), want at most 100%% for one thread", pid, 100*share, total, p.DurationNanos)
	}
}

// TestServeHealthAndMetrics checks serve's /healthz (no token needed, 503
// once the data directory is gone) and /metrics (token needed; store and
// query figures).
func TestServeHealthAndMetrics(t *testing.T) {
	bin, _, data := importedDataDir(t, 3000)
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--data", data, "--listen", addr, "--auth-token", "s3cret")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	if code, body := httpGet(t, url+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _ := httpGet(t, url+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}
	auth := []string{"Authorization", "Bearer s3cret"}
	getJSON(t, url+"/api/sources", nil, auth...)
	m := scrape(t, url+"/metrics", auth...)
	if v := metricSum(m, "heatscope_store_blocks"); v < 1 {
		t.Errorf("heatscope_store_blocks = %v, want >= 1", v)
	}
	if v := metricSum(m, "heatscope_store_block_bytes"); v <= 0 {
		t.Errorf("heatscope_store_block_bytes = %v", v)
	}
	if v := metricSum(m, "heatscope_query_duration_seconds", "endpoint", "/api/sources", "code", "200"); v != 1 {
		t.Errorf("query latency of /api/sources counts %v requests, want 1", v)
	}
	if _, ok := m["heatscope_samples_total"]; ok {
		t.Error("serve exports sampler metrics, but it samples nothing")
	}
	if err := os.Rename(data, data+".moved"); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, url+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "data directory") {
		t.Errorf("/healthz with the data directory gone: %d %q, want 503 naming the data directory", code, body)
	}
	d.stop(t)
}
