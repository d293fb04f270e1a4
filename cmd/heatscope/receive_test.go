package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReceiveBadFlags: what receive refuses to start with, and why.
func TestReceiveBadFlags(t *testing.T) {
	t.Setenv(tokenEnv, "")
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-listen", "0.0.0.0:0", "--http-listen", ""}, "--auth-token"},
		{[]string{"--grpc-listen", "", "--http-listen", ""}, "nothing to receive on"},
		{[]string{"--tls-cert-file", "x.pem"}, "go together"},
		{[]string{"--tls-cert-file", dir + "/none.pem", "--tls-key-file", dir + "/none.key"}, "none.pem"},
		{[]string{"--max-request-size", "lots"}, "--max-request-size"},
		{[]string{"--data", ""}, "data directory"},
		{[]string{"--retention", "forever"}, "--retention"},
		{[]string{"--retention-size", "big"}, "--retention-size"},
		{[]string{"--memory-limit", "much"}, "--memory-limit"},
	} {
		var out, errb bytes.Buffer
		err := runReceive(append([]string{"--data", dir}, c.args...), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("receive %v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}

// TestRefusedSummary: receive's last line names each refusal's reason
// and count in words (it printed Go's "map[busy:1]").
func TestRefusedSummary(t *testing.T) {
	for _, c := range []struct {
		refused map[string]uint64
		want    string
	}{
		{nil, "0 requests refused"},
		{map[string]uint64{"busy": 0}, "0 requests refused"},
		{map[string]uint64{"busy": 1}, "1 requests refused (busy 1)"},
		{map[string]uint64{"rate-limited": 2, "invalid": 3}, "5 requests refused (invalid 3, rate-limited 2)"},
	} {
		if got := refusedSummary(c.refused); got != c.want {
			t.Errorf("refusedSummary(%v) = %q, want %q", c.refused, got, c.want)
		}
	}
}
