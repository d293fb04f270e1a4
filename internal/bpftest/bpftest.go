// Package bpftest decides whether tests that need BPF and perf events can
// run here. They skip with the reason when they cannot, unless
// HEATSCOPE_REQUIRE_BPF=1 (as in CI), where a skip would hide a broken
// sampler and so fails the test instead.
package bpftest

import (
	"os"
	"testing"
)

// Require skips or fails t when this process cannot load BPF programs.
func Require(t testing.TB) {
	t.Helper()
	if reason := unavailable(); reason != "" {
		if os.Getenv("HEATSCOPE_REQUIRE_BPF") == "1" {
			t.Fatalf("HEATSCOPE_REQUIRE_BPF=1 but BPF tests cannot run: %s", reason)
		}
		t.Skipf("needs BPF and perf events: %s (set HEATSCOPE_REQUIRE_BPF=1 to make this a failure)", reason)
	}
}

func unavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return "kernel BTF missing: " + err.Error()
	}
	return ""
}
