package metrics

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/heatscope/heatscope/otlpreceive"
)

// TestOTLPReceiveMetrics: a real receiver refusing a garbage request and
// an unauthenticated one: each counted under its reason, nothing stored.
func TestOTLPReceiveMetrics(t *testing.T) {
	r, err := otlpreceive.New(otlpreceive.Options{AuthToken: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Open: func(string) (otlpreceive.Store, error) { t.Fatal("a refused request opened a store"); return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	if err := m.RegisterOTLPReceive(r); err != nil {
		t.Fatal(err)
	}
	h := r.HTTPHandler()
	for _, token := range []string{"tok", "wrong"} {
		req := httptest.NewRequest(http.MethodPost, otlpreceive.HTTPPath, bytes.NewReader([]byte("\xffgarbage")))
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	fams := scrape(t, m.Handler())
	refused := map[string]float64{}
	for _, s := range fams["heatscope_otlp_receive_refused_requests_total"].GetMetric() {
		refused[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
	}
	if refused["invalid"] != 1 || refused["unauthenticated"] != 1 || len(refused) != len(otlpreceive.RefusalReasons) {
		t.Errorf("refused %v, want one invalid, one unauthenticated, every reason listed", refused)
	}
	if v := value(t, fams, "heatscope_otlp_receive_samples_total"); v != 0 {
		t.Errorf("%v samples stored", v)
	}
	if v := value(t, fams, "heatscope_otlp_receive_requests_total"); v != 1 {
		t.Errorf("%v requests counted, want 1 (the unauthenticated one is refused before it is read)", v)
	}
	if _, ok := fams["heatscope_otlp_receive_bucket_up"]; ok {
		t.Errorf("heatscope_otlp_receive_bucket_up without a bucket")
	}
}

// TestOTLPReceiveBucketUp: with a bucket, heatscope_otlp_receive_bucket_up
// follows what the receiver's Shipping says.
func TestOTLPReceiveBucketUp(t *testing.T) {
	var down error
	r, err := otlpreceive.New(otlpreceive.Options{Open: func(string) (otlpreceive.Store, error) { return nil, errors.New("no store") },
		Shipping: func() error { return down }})
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	if err := m.RegisterOTLPReceive(r); err != nil {
		t.Fatal(err)
	}
	if v := value(t, scrape(t, m.Handler()), "heatscope_otlp_receive_bucket_up"); v != 1 {
		t.Errorf("bucket up %v while it answers, want 1", v)
	}
	down = errors.New("bucket s3:b does not answer")
	if v := value(t, scrape(t, m.Handler()), "heatscope_otlp_receive_bucket_up"); v != 0 {
		t.Errorf("bucket up %v while it does not answer, want 0", v)
	}
}
