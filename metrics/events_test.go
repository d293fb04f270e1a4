package metrics

import (
	"testing"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/store"
)

// TestEventMetrics checks the kernel log reader's status and the store's
// event count as /metrics shows them, with the reader on and off.
func TestEventMetrics(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 3 {
		if err := db.AppendEvent(events.Event{Time: int64(i+1) * 1e9, Source: "api", Severity: events.Info, Text: "deploy"}); err != nil {
			t.Fatal(err)
		}
	}
	status := events.KmsgStatus{Enabled: true, Records: 10, Matched: 2, Missed: 1, Malformed: 4}
	m := New()
	if err := m.RegisterEvents(EventStats{Kmsg: func() events.KmsgStatus { return status }, Store: db}); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, m.Handler())
	if v := value(t, fams, "heatscope_kmsg_events_enabled"); v != 1 {
		t.Errorf("kmsg_events_enabled = %v, want 1", v)
	}
	if v := value(t, fams, "heatscope_events_stored"); v != 3 {
		t.Errorf("events_stored = %v, want 3", v)
	}
	want := map[string]float64{"matched": 2, "unmatched": 8, "missed": 1, "malformed": 4}
	for _, s := range fams["heatscope_kmsg_records_total"].GetMetric() {
		r := s.GetLabel()[0].GetValue()
		if got := s.GetCounter().GetValue(); got != want[r] {
			t.Errorf("kmsg_records_total{result=%q} = %v, want %v", r, got, want[r])
		}
		delete(want, r)
	}
	if len(want) != 0 {
		t.Errorf("results missing from kmsg_records_total: %v", want)
	}

	status = events.KmsgStatus{Reason: "open /dev/kmsg: permission denied"}
	if v := value(t, scrape(t, m.Handler()), "heatscope_kmsg_events_enabled"); v != 0 {
		t.Errorf("kmsg_events_enabled = %v with the reader off, want 0", v)
	}
}
