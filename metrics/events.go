package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/events"
)

// The kernel log reader's metrics.
var (
	descKmsgEnabled   = desc("kmsg_events_enabled", "1 while kernel log (/dev/kmsg) events are recorded, 0 when they are off (no privilege, no /dev/kmsg, --kmsg '').")
	descKmsgRecords   = desc("kmsg_records_total", "Kernel log records read, by result: matched (kept as events), unmatched, missed (overwritten before they were read) or malformed.", "result")
	descEventsStored  = desc("events_stored", "System events held in the store.")
	descEventsDropped = desc("events_dropped_total", "System events deleted by retention (age, size or count).")
)

// EventStats is what RegisterEvents reads at scrape time: the kernel log
// reader's status (nil when there is none) and the store's event counts.
type EventStats struct {
	Kmsg  func() events.KmsgStatus
	Store StoreStats
}

// RegisterEvents adds the kernel log reader's and the event store's
// counters.
func (m *Metrics) RegisterEvents(st EventStats) error {
	return m.Register(&eventCollector{st: st})
}

type eventCollector struct{ st EventStats }

func (c *eventCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKmsgEnabled, descKmsgRecords, descEventsStored, descEventsDropped} {
		ch <- d
	}
}

func (c *eventCollector) Collect(ch chan<- prometheus.Metric) {
	var k events.KmsgStatus
	if c.st.Kmsg != nil {
		k = c.st.Kmsg()
	}
	enabled := 0.0
	if k.Enabled {
		enabled = 1
	}
	ch <- prometheus.MustNewConstMetric(descKmsgEnabled, prometheus.GaugeValue, enabled)
	unmatched := k.Records - min(k.Matched, k.Records) // Records counts parsed records only
	for _, r := range []struct {
		result string
		n      uint64
	}{{"matched", k.Matched}, {"unmatched", unmatched}, {"missed", k.Missed}, {"malformed", k.Malformed}} {
		ch <- prometheus.MustNewConstMetric(descKmsgRecords, prometheus.CounterValue, float64(r.n), r.result)
	}
	if c.st.Store != nil {
		s := c.st.Store.Stats()
		ch <- prometheus.MustNewConstMetric(descEventsStored, prometheus.GaugeValue, float64(s.Events))
		ch <- prometheus.MustNewConstMetric(descEventsDropped, prometheus.CounterValue, float64(s.EventsDropped))
	}
}
