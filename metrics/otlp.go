package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/otlpexport"
)

// The OTLP exporter's metrics (record --otlp-endpoint).
var (
	descOTLPExported = desc("otlp_exported_samples_total", "Samples the OTLP endpoint took.")
	descOTLPDropped  = desc("otlp_dropped_samples_total", "Samples not exported, by reason: queue_full (the oldest batches, dropped while the endpoint was down or slow and the queue over its bound), rejected (the endpoint refused them for good), shutdown (still queued when the recording stopped).", "reason")
	descOTLPFailed   = desc("otlp_failed_requests_total", "OTLP export requests that failed, each attempt counted (retries included).")
	descOTLPQueued   = desc("otlp_queue_samples", "Samples waiting to be exported, the batch being sent included.")
	descOTLPQueueB   = desc("otlp_queue_bytes", "Protobuf bytes of the batches waiting to be exported, the batch being sent included.")
)

// OTLPExport is what RegisterOTLPExport reads at scrape time:
// otlpexport.Exporter.
type OTLPExport interface{ Stats() otlpexport.Stats }

// RegisterOTLPExport adds the OTLP exporter's counters.
func (m *Metrics) RegisterOTLPExport(x OTLPExport) error {
	return m.Register(otlpCollector{x})
}

type otlpCollector struct{ x OTLPExport }

func (c otlpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOTLPExported, descOTLPDropped, descOTLPFailed, descOTLPQueued, descOTLPQueueB} {
		ch <- d
	}
}

func (c otlpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.x.Stats()
	ch <- prometheus.MustNewConstMetric(descOTLPExported, prometheus.CounterValue, float64(st.ExportedSamples))
	for reason, n := range map[string]uint64{"queue_full": st.DroppedQueueFull, "rejected": st.DroppedRejected, "shutdown": st.DroppedShutdown} {
		ch <- prometheus.MustNewConstMetric(descOTLPDropped, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(descOTLPFailed, prometheus.CounterValue, float64(st.FailedRequests))
	ch <- prometheus.MustNewConstMetric(descOTLPQueued, prometheus.GaugeValue, float64(st.QueuedSamples))
	ch <- prometheus.MustNewConstMetric(descOTLPQueueB, prometheus.GaugeValue, float64(st.QueuedBytes))
}
