package shipper

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the shipper's Prometheus metrics. lost, if not nil,
// counts blocks deleted locally before they were shipped (the store's
// Stats.UnshippedDropped).
func (s *Shipper) Collector(lost func() uint64) prometheus.Collector {
	return &collector{s: s, lost: lost}
}

type collector struct {
	s    *Shipper
	lost func() uint64
}

var (
	descUploads  = prometheus.NewDesc("heatscope_shipper_uploads_total", "Objects uploaded to the bucket (block data, block meta, event segments).", nil, nil)
	descFailures = prometheus.NewDesc("heatscope_shipper_upload_failures_total", "Shipping passes that failed (and were retried with backoff).", nil, nil)
	descBlocks   = prometheus.NewDesc("heatscope_shipper_blocks_shipped_total", "Blocks uploaded whole (data and meta.json).", nil, nil)
	descBytes    = prometheus.NewDesc("heatscope_shipper_uploaded_bytes_total", "Bytes uploaded to the bucket.", nil, nil)
	descPending  = prometheus.NewDesc("heatscope_shipper_pending_blocks", "Blocks written locally and not yet in the bucket.", nil, nil)
	descLag      = prometheus.NewDesc("heatscope_shipper_lag_seconds", "Seconds from the newest sample in the bucket to now (no sample shipped yet: not reported).", nil, nil)
	descLost     = prometheus.NewDesc("heatscope_shipper_blocks_lost_total", "Blocks the local size limit or a full disk deleted before they were shipped.", nil, nil)
	descUnread   = prometheus.NewDesc("heatscope_shipper_unreadable_blocks", "Blocks in the data directory whose meta.json this heatscope cannot read (corrupt, naming another block, or a format version it does not read): not shipped, each named in a warning, looked at again every pass.", nil, nil)
	descLease    = prometheus.NewDesc("heatscope_shipper_node_lease_held", "1 while this recorder holds its node name's lease in the bucket, 0 while it does not (another recorder took the name, or the bucket did not answer for the lease's TTL): nothing is shipped then. Absent without a lease.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUploads, descFailures, descBlocks, descBytes, descPending, descUnread, descLag, descLost, descLease} {
		ch <- d
	}
	c.s.delays.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(descUploads, prometheus.CounterValue, float64(st.Uploads))
	ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(st.Failures))
	ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.CounterValue, float64(st.BlocksShipped))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(descUnread, prometheus.GaugeValue, float64(st.Unreadable))
	if st.NewestShipped > 0 {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, time.Since(time.Unix(0, st.NewestShipped)).Seconds())
	}
	if c.lost != nil {
		ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(c.lost()))
	}
	if l := c.s.opts.Lease; l != nil {
		held := 0.0
		if l.Held() == nil {
			held = 1
		}
		ch <- prometheus.MustNewConstMetric(descLease, prometheus.GaugeValue, held)
	}
	c.s.delays.Collect(ch)
}
