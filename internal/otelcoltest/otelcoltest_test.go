package otelcoltest

import (
	"strings"
	"testing"
)

// TestStartRestart: the Collector starts with the profiles gate on and a
// profiles pipeline, answers on its ports, stops (its ports then refuse)
// and comes back on the same ports.
func TestStartRestart(t *testing.T) {
	c := Start(t, Config{GRPCEndpoint: "127.0.0.1:1", HTTPEndpoint: "http://127.0.0.1:1"})
	if !answers(c.GRPCAddr) || !answers(c.HTTPAddr) {
		t.Fatalf("the Collector does not answer on %s and %s", c.GRPCAddr, c.HTTPAddr)
	}
	if out := c.Output(); !strings.Contains(out, "Starting GRPC server") || !strings.Contains(out, "Starting HTTP server") {
		t.Fatalf("the Collector's OTLP receiver did not start:\n%s", out)
	}
	c.Stop()
	if answers(c.GRPCAddr) {
		t.Fatalf("the stopped Collector still answers on %s", c.GRPCAddr)
	}
	c.Restart()
	if !answers(c.GRPCAddr) || !answers(c.HTTPAddr) {
		t.Fatalf("the restarted Collector does not answer on %s and %s", c.GRPCAddr, c.HTTPAddr)
	}
	if n := strings.Count(c.Output(), readyLine); n != 2 {
		t.Fatalf("the Collector said it was ready %d times over a start and a restart, want 2", n)
	}
}

// TestConfigForwards: the generated config forwards the profiles to both
// endpoints, with retries, and the headers given.
func TestConfigForwards(t *testing.T) {
	c := &Collector{GRPCAddr: "127.0.0.1:4317", HTTPAddr: "127.0.0.1:4318"}
	y := c.yaml(Config{GRPCEndpoint: "127.0.0.1:9", HTTPEndpoint: "http://127.0.0.1:10", Headers: map[string]string{"authorization": "Bearer x"}})
	for _, want := range []string{"exporters: [debug, otlp_grpc, otlp_http]", "endpoint: 127.0.0.1:9", "endpoint: http://127.0.0.1:10",
		`authorization: "Bearer x"`, "retry_on_failure:", "profiles:"} {
		if !strings.Contains(y, want) {
			t.Errorf("config lacks %q:\n%s", want, y)
		}
	}
}
