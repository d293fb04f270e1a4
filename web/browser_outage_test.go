package web

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatscope/heatscope/store"
)

// TestBrowserShowsWarnings opens the UI while its storage does not answer:
// the Warning headers of the answers (the data may be stale since when)
// show in a banner at the top of the page, once however many answers
// carry them, and the banner goes once the answers carry none.
func TestBrowserShowsWarnings(t *testing.T) {
	var down atomic.Bool
	since := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	fx := newFixture(t, uiStore(t), Options{Outage: func() *Outage {
		if !down.Load() {
			return nil
		}
		return &Outage{Storage: "bucket s3://fleet", Since: since, Listed: since.Add(-10 * time.Second),
			Err: fmt.Errorf("bucket s3://fleet: list: timeout: %w", store.ErrUnavailable)}
	}})
	b := newBrowser(t)
	banner := func() (shown bool, text string) {
		type state struct {
			Shown bool
			Text  string
		}
		s := eval[state](t, b.ctx, `(() => { const el = document.getElementById('api-warnings');
			return {Shown: !!el && !el.hidden, Text: el ? el.textContent : ''}; })()`)
		return s.Shown, s.Text
	}
	b.openFresh(fx.url + "/#source=fixture")
	if shown, text := banner(); shown {
		t.Fatalf("a warning banner with no Warning: %q", text)
	}
	down.Store(true)
	b.openFresh(fx.url + "/#source=fixture")
	shown, text := banner()
	want := "Warning: bucket s3://fleet has not answered since 2026-11-27T16:00:00Z: data uploaded after 2026-11-27T15:59:50Z (its last listing) may be missing"
	if !shown || text != want {
		t.Fatalf("banner shown %v, %q; want %q (once, though every view's answer carries it)", shown, text, want)
	}
	b.screenshot("warnings.png")
	down.Store(false)
	b.openFresh(fx.url + "/#source=fixture")
	if shown, text := banner(); shown {
		t.Fatalf("the banner stays once no answer carries a Warning: %q", text)
	}
}
