package browsertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestUntilAfterNavigation loads a new document again and again and
// waits, right after each load, for what only that document sets: each
// wait must run in the document just loaded, never in the one it
// replaced (with chromedp.Poll in place of Until this test failed in 3
// of 6 runs under load, with "Cannot find context with specified id").
func TestUntilAfterNavigation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		// The page marks itself a frame after it loads, as the UI does
		// when its first answers arrive.
		fmt.Fprintf(w, `<!doctype html><body><script>
			addEventListener('load', () => requestAnimationFrame(() => { document.body.dataset.page = %q; }));
		</script></body>`, r.URL.Query().Get("page"))
	}))
	t.Cleanup(srv.Close)
	ctx := Start(t, 400, 300, 5*time.Minute)
	for i := range 50 {
		page := fmt.Sprint(i)
		if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(srv.URL+"/?page="+page),
			Until(fmt.Sprintf(`document.body.dataset.page === %q`, page), 30*time.Second)); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
	}
}

// TestUntilFails: a wait whose expression stays false ends after its
// timeout, and one whose expression throws ends at once; both errors
// name the expression.
func TestUntilFails(t *testing.T) {
	ctx := Start(t, 400, 300, time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ expr, want string }{
		{`document.title === 'never'`, "still false after 300ms"},
		{`document.nosuch.field === 1`, "TypeError"},
	} {
		err := chromedp.Do(ctx, Until(c.expr, 300*time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), c.expr) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Until(%s): %v, want an error naming it and %q", c.expr, err, c.want)
		}
	}
}
