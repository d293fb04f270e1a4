package otlpreceive

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// countingStore counts what reaches it: the fuzz target's store, as fast
// as the decoder it watches.
type countingStore struct{ n *atomic.Int64 }

func (c countingStore) Append(*sample.Sample) error { c.n.Add(1); return nil }
func (c countingStore) SetPeriod(int64)             {}

// FuzzHTTP feeds any body to the HTTP handler's decode path, protobuf and
// JSON: it answers 200, 400 or 413, never panics, and a refused request
// stores nothing.
func FuzzHTTP(f *testing.F) {
	_, p := workload(f, "fuzz", 1, 0.05, 1)
	f.Add(marshal(f, p), false)
	f.Add([]byte(`{"resourceProfiles":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"n"}}]}}]}`), true)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00}, false)
	f.Fuzz(func(t *testing.T, body []byte, json bool) {
		var n atomic.Int64
		r, err := New(Options{Open: func(string) (Store, error) { return countingStore{&n}, nil }, MaxRequestBytes: 1 << 20,
			Now: func() time.Time { return time.Unix(2_000_000_000, 0) }})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, HTTPPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", map[bool]string{false: contentProtobuf, true: contentJSON}[json])
		w := httptest.NewRecorder()
		r.HTTPHandler().ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if n.Load() != 0 {
				t.Fatalf("%d: %d samples stored from a refused request", w.Code, n.Load())
			}
		default:
			t.Fatalf("status %d for a request body: %s", w.Code, w.Body)
		}
	})
}
