package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzAPI sends arbitrary paths and query strings to the handler: no
// answer may be a 500 (a recovered panic is one), every error must be
// JSON, and every 400 must name its parameter. The seeds in
// testdata/fuzz/FuzzAPI cover each endpoint with good and bad parameters.
func FuzzAPI(f *testing.F) {
	srv, err := New(testStore(f), Options{Logger: discard()})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, path, rawQuery string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path, req.URL.RawQuery = path, rawQuery
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		if rec.Code >= 500 {
			t.Fatalf("%q?%q: %d %s", path, rawQuery, rec.Code, body)
		}
		if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Content-Security-Policy") == "" {
			t.Fatalf("%q?%q: security headers missing: %v", path, rawQuery, rec.Header())
		}
		if rec.Header().Get("Content-Type") == jsonType && !json.Valid(body) {
			t.Fatalf("%q?%q: invalid JSON %q", path, rawQuery, body)
		}
		if rec.Code == http.StatusBadRequest {
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Param == "" || !strings.HasPrefix(e.Error, e.Param+": ") {
				t.Fatalf("%q?%q: a 400 that names no parameter: %s", path, rawQuery, body)
			}
		}
	})
}
