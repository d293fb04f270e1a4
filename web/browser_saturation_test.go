package web

import (
	"strings"
	"testing"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/saturation"
)

// TestBrowserSaturationEvent: a cpu-saturation event is a marker on the
// timeline and a row of the event list labelled with its source and kind,
// its text shown as text.
func TestBrowserSaturationEvent(t *testing.T) {
	db := uiStore(t)
	e := events.Event{Time: (base + 1) * 1e9, Source: saturation.Source, Severity: events.Warning,
		Text: "<b>spin</b> (pid 42, tid 43) kept CPU 1 97% busy for 2.0s while the node averaged 30%; top user function saturate_hot",
		Labels: map[string]string{"kind": saturation.Kind, "comm": "<b>spin</b>", "pid": "42", "tid": "43", "cpu": "1",
			"duration_seconds": "2.000", "cpu_busy_percent": "97.0", "node_busy_percent": "30.0", "user_function": "saturate_hot"}}
	if err := db.AppendEvent(e); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/#source=fixture")
	if got := eval[string](t, b.ctx, `document.getElementById('timeline').dataset.markers`); got != "1" {
		t.Errorf("timeline markers: %q, want 1", got)
	}
	row := eval[string](t, b.ctx, `document.querySelector('#events button.event .src').textContent`)
	if row != "heatscope · cpu-saturation" {
		t.Errorf("event label %q, want %q", row, "heatscope · cpu-saturation")
	}
	text := eval[string](t, b.ctx, `document.querySelector('#events button.event .text').textContent`)
	if text != e.Text || eval[int](t, b.ctx, `document.querySelectorAll('#events b').length`) != 0 {
		t.Errorf("event text %q, want %q as text", text, e.Text)
	}
	if !strings.Contains(eval[string](t, b.ctx, `document.querySelector('#events button.event').textContent`), "warning") {
		t.Error("the event row does not show its severity")
	}
	b.screenshot("saturation-event.png")
}
