package web

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHealthAndMetricsHooks checks /healthz (no token, 503 with the
// reason), /metrics (token required, GET and HEAD only) and the query
// observer, and that without the hooks both paths are 404s.
func TestHealthAndMetricsHooks(t *testing.T) {
	var unhealthy atomic.Pointer[error]
	var mu sync.Mutex
	var observed []string
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metric 1\n")) })
	fx := newFixture(t, testStore(t), Options{
		AuthToken: "tok",
		Metrics:   metrics,
		Health: func() error {
			if p := unhealthy.Load(); p != nil {
				return *p
			}
			return nil
		},
		ObserveQuery: func(endpoint string, status int, elapsed time.Duration) {
			mu.Lock()
			observed = append(observed, endpoint+" "+http.StatusText(status))
			mu.Unlock()
			if elapsed <= 0 {
				t.Errorf("%s took %v", endpoint, elapsed)
			}
		},
	})
	if resp, body := fx.get(t, "/healthz"); resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	err := errors.New("the sample ring was last read 12s ago")
	unhealthy.Store(&err)
	if resp, body := fx.get(t, "/healthz"); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "last read 12s ago") {
		t.Errorf("/healthz when unhealthy: %d %q", resp.StatusCode, body)
	}
	if resp, _ := fx.get(t, "/metrics"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d", resp.StatusCode)
	}
	if resp, body := fx.get(t, "/metrics", "Authorization", "Bearer tok"); resp.StatusCode != http.StatusOK || string(body) != "metric 1\n" {
		t.Errorf("/metrics: %d %q", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPost, fx.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer tok")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %v %v", resp.StatusCode, err)
	}
	fx.get(t, "/api/sources", "Authorization", "Bearer tok")
	fx.get(t, "/api/heatmap?rows=0", "Authorization", "Bearer tok")
	// The observer runs once the response is sent: wait for it.
	want := "/api/sources OK,/api/heatmap Bad Request"
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got = strings.Join(observed, ",")
		mu.Unlock()
		if got == want {
			break
		}
	}
	if got != want {
		t.Errorf("observed %q, want %q", got, want)
	}

	bare := newFixture(t, testStore(t), Options{})
	for _, path := range []string{"/healthz", "/metrics"} {
		if resp, _ := bare.get(t, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s without the hook: %d, want 404", path, resp.StatusCode)
		}
	}
}
