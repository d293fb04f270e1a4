package metrics

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.Metric) != 1 {
		t.Fatalf("%s: missing or not one series", name)
	}
	m := f.Metric[0]
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

// TestStoreMetrics appends samples to a real store, cuts them into a block
// and checks the figures the collector reads at scrape time.
func TestStoreMetrics(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Source: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := New()
	if err := m.RegisterStore(db); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterStore(db); err == nil {
		t.Error("registering the store twice succeeded")
	}
	before := scrape(t, m.Handler())
	if v := value(t, before, "heatscope_store_samples_appended_total"); v != 0 {
		t.Errorf("appended before any sample: %v", v)
	}
	g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: 10})
	var s sample.Sample
	n := 0
	for g.Next(&s) {
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		n++
	}
	db.Flush()
	after := scrape(t, m.Handler())
	if v := value(t, after, "heatscope_store_samples_appended_total"); v != float64(n) {
		t.Errorf("appended %v, want %d", v, n)
	}
	if v := value(t, after, "heatscope_store_head_samples"); v != float64(n) {
		t.Errorf("head holds %v, want %d", v, n)
	}
	if v := value(t, after, "heatscope_store_wal_bytes"); v <= 0 {
		t.Errorf("WAL bytes %v after a flush", v)
	}
	// The process collector reads this process.
	if v := value(t, after, "process_resident_memory_bytes"); v <= 0 {
		t.Errorf("process_resident_memory_bytes = %v", v)
	}
	if v := value(t, after, "process_cpu_seconds_total"); v <= 0 {
		t.Errorf("process_cpu_seconds_total = %v", v)
	}
}

func TestQueryLatency(t *testing.T) {
	m := New()
	m.ObserveQuery("/api/heatmap", 200, 3*time.Millisecond)
	m.ObserveQuery("/api/heatmap", 200, 300*time.Millisecond)
	m.ObserveQuery("/api/heatmap", 400, time.Millisecond)
	fams := scrape(t, m.Handler())
	got := map[string]*dto.Histogram{}
	for _, s := range fams["heatscope_query_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.Label {
			labels[l.GetName()] = l.GetValue()
		}
		got[labels["endpoint"]+" "+labels["code"]] = s.Histogram
	}
	ok := got["/api/heatmap 200"]
	if ok.GetSampleCount() != 2 || ok.GetSampleSum() < 0.302 || ok.GetSampleSum() > 0.304 {
		t.Errorf("200s: count %d, sum %v; want 2, 0.303", ok.GetSampleCount(), ok.GetSampleSum())
	}
	if got["/api/heatmap 400"].GetSampleCount() != 1 {
		t.Errorf("400s: %v", got["/api/heatmap 400"])
	}
	// The 300 ms request is in the 0.5 s bucket and not the 0.25 s one.
	for _, b := range ok.Bucket {
		want := uint64(1)
		if b.GetUpperBound() >= 0.5 {
			want = 2
		} else if b.GetUpperBound() < 0.003 {
			want = 0
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

// TestGarbageCollectorCPU: the agent's /metrics says how many collections
// the Go runtime made and the CPU they took, which the overhead guard
// counts in "the rest".
func TestGarbageCollectorCPU(t *testing.T) {
	m := New()
	garbage := make([][]byte, 0, 64)
	for range 64 {
		garbage = append(garbage, make([]byte, 1<<20))
		runtime.GC()
	}
	runtime.KeepAlive(garbage)
	fams := scrape(t, m.Handler())
	if cpu := value(t, fams, "go_cpu_classes_gc_total_cpu_seconds_total"); !(cpu > 0) {
		t.Errorf("go_cpu_classes_gc_total_cpu_seconds_total %v after 64 collections, want above 0", cpu)
	}
	if f := fams["go_gc_duration_seconds"]; f == nil || len(f.Metric) != 1 || f.Metric[0].GetSummary().GetSampleCount() < 64 {
		t.Errorf("go_gc_duration_seconds: %v, want a count of at least 64 collections", f)
	}
}
