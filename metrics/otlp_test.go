package metrics

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/heatscope/heatscope/otlpexport"
	"github.com/heatscope/heatscope/sample"
)

// TestOTLPMetrics: a real exporter whose endpoint is down, stopped: the
// samples it could not send are heatscope_otlp_dropped_samples_total
// with reason shutdown, none exported, nothing left queued.
func TestOTLPMetrics(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // down
	x, err := otlpexport.New(otlpexport.Config{Endpoint: addr, Insecure: true, Interval: time.Hour, Timeout: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	if err := m.RegisterOTLPExport(x); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		x.Add(&sample.Sample{Time: int64(i), PID: 1, PeriodNs: 10_101_010})
	}
	if v := value(t, scrape(t, m.Handler()), "heatscope_otlp_queue_samples"); v != 0 {
		t.Errorf("queued %v before a batch was cut", v)
	}
	x.Close()
	fams := scrape(t, m.Handler())
	dropped := map[string]float64{}
	for _, s := range fams["heatscope_otlp_dropped_samples_total"].GetMetric() {
		dropped[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
	}
	if dropped["shutdown"] != 25 || dropped["queue_full"] != 0 || dropped["rejected"] != 0 {
		t.Errorf("dropped %v, want 25 at shutdown", dropped)
	}
	if v := value(t, fams, "heatscope_otlp_exported_samples_total"); v != 0 {
		t.Errorf("exported %v", v)
	}
	if v := value(t, fams, "heatscope_otlp_queue_bytes"); v != 0 {
		t.Errorf("queue bytes %v after the stop", v)
	}
}
