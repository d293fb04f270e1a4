// Package apitest reads the HTTP API from tests.
package apitest

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// GetJSON fetches url and decodes its JSON answer into v; any status but
// 200 OK, or an answer that is not JSON, fails t.
func GetJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
