package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatscope/heatscope/store"
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

// TestStorageOutage checks what a storage outage (Options.Outage) does to
// the answers: nothing read yet, every API request is a 503 and /healthz
// not ready; read before, answers carry a Warning saying since when they
// may be stale and /healthz is ready but degraded; a store health error
// that is the outage itself is told by the outage.
func TestStorageOutage(t *testing.T) {
	var outage atomic.Pointer[Outage]
	since := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	down := fmt.Errorf("bucket s3://fleet: list: timeout: %w", store.ErrUnavailable)
	fx := newFixture(t, testStore(t), Options{
		Health: func() error {
			if outage.Load() != nil {
				return down
			}
			return nil
		},
		Outage: func() *Outage { return outage.Load() },
	})
	outage.Store(&Outage{Storage: "bucket s3://fleet", Since: since, Err: down})
	if resp, body := fx.get(t, "/healthz"); resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(string(body), "not ready: bucket s3://fleet: list: timeout") ||
		!strings.Contains(string(body), "no answer since 2026-11-27T16:00:00Z; nothing was read from it yet") {
		t.Errorf("/healthz before anything was read: %d %q", resp.StatusCode, body)
	}
	for _, path := range []string{"/api/sources", "/api/events", "/api/nodes"} {
		if resp, body := fx.get(t, path); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "nothing was read from it yet") {
			t.Errorf("%s before anything was read: %d %q, want 503", path, resp.StatusCode, body)
		}
	}
	outage.Store(&Outage{Storage: "bucket s3://fleet", Since: since, Err: down, Listed: since.Add(-20 * time.Second)})
	if resp, body := fx.get(t, "/healthz"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "ok, degraded: bucket s3://fleet has not answered since 2026-11-27T16:00:00Z") {
		t.Errorf("/healthz during an outage after a listing: %d %q, want 200 degraded", resp.StatusCode, body)
	}
	for _, path := range []string{"/api/sources", "/api/events"} {
		resp, _ := fx.get(t, path)
		w := strings.Join(resp.Header.Values("Warning"), "\n")
		if resp.StatusCode != http.StatusOK || !strings.Contains(w, "bucket s3://fleet has not answered since 2026-11-27T16:00:00Z: data uploaded after 2026-11-27T15:59:40Z (its last listing) may be missing") {
			t.Errorf("%s during an outage: %d, Warning %q", path, resp.StatusCode, w)
		}
	}
	outage.Store(nil)
	if resp, body := fx.get(t, "/healthz"); resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz after the outage: %d %q", resp.StatusCode, body)
	}
	if resp, _ := fx.get(t, "/api/sources"); resp.StatusCode != http.StatusOK || len(resp.Header.Values("Warning")) != 0 {
		t.Errorf("/api/sources after the outage: %d %q", resp.StatusCode, resp.Header.Values("Warning"))
	}
}
