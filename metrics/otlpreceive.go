package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/otlpreceive"
)

// The OTLP receiver's metrics (heatscope receive).
var (
	descRecvRequests = desc("otlp_receive_requests_total", "OTLP profiles export requests received (refused ones included).")
	descRecvSamples  = desc("otlp_receive_samples_total", "Received samples stored in their node's data directory.")
	descRecvRefused  = desc("otlp_receive_refused_requests_total", "Requests refused whole, storing nothing, by reason: invalid, too-large, rate-limited, busy, unauthenticated, conflict, store, cancelled (the sender gave up before it was stored).", "reason")
	descRecvRejected = desc("otlp_receive_rejected_samples_total", "Samples of accepted requests left out (no CPU, no period, no or a far-future time, a failed append), as the responses' partial success said.")
	descRecvNodes    = desc("otlp_receive_nodes", "Nodes that have sent since the receiver started.")
	descRecvBucketUp = desc("otlp_receive_bucket_up", "1 while the bucket the received nodes ship to answers, 0 while it does not (the samples are stored and wait on disk; the answers and the log say so). Absent without --objstore-config.")
)

// OTLPReceive is what RegisterOTLPReceive reads at scrape time:
// otlpreceive.Receiver.
type OTLPReceive interface{ Stats() otlpreceive.Stats }

// RegisterOTLPReceive adds the OTLP receiver's counters.
func (m *Metrics) RegisterOTLPReceive(r OTLPReceive) error {
	return m.Register(otlpReceiveCollector{r})
}

type otlpReceiveCollector struct{ r OTLPReceive }

func (c otlpReceiveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRecvRequests, descRecvSamples, descRecvRefused, descRecvRejected, descRecvNodes, descRecvBucketUp} {
		ch <- d
	}
}

func (c otlpReceiveCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.Stats()
	ch <- prometheus.MustNewConstMetric(descRecvRequests, prometheus.CounterValue, float64(st.Requests))
	ch <- prometheus.MustNewConstMetric(descRecvSamples, prometheus.CounterValue, float64(st.Samples))
	for _, reason := range otlpreceive.RefusalReasons {
		ch <- prometheus.MustNewConstMetric(descRecvRefused, prometheus.CounterValue, float64(st.Refused[reason]), reason)
	}
	ch <- prometheus.MustNewConstMetric(descRecvRejected, prometheus.CounterValue, float64(st.Rejected))
	ch <- prometheus.MustNewConstMetric(descRecvNodes, prometheus.GaugeValue, float64(st.Nodes))
	if st.Ships {
		up := 1.0
		if st.ShippingErr != "" {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(descRecvBucketUp, prometheus.GaugeValue, up)
	}
}
