// Package needs is the one place of the tests' rule for what a test
// needs and does not find here (BPF, a compiler, MinIO, Chromium, the
// Collector, an interpreter): it skips, saying why, unless the
// environment requires it (HEATSCOPE_REQUIRE_BPF=1 and its kin, as CI
// sets them), where a skip would hide a broken part, so it fails.
package needs

import (
	"os"
	"testing"
)

// Missing stops t for want of something it needs, saying why: it fails
// t when the environment variable required is "1", else skips it.
func Missing(t testing.TB, required, why string) {
	t.Helper()
	if Required(required) {
		t.Fatalf("%s=1 requires it: %s", required, why)
	}
	t.Skipf("skipping: %s (%s=1 makes this a failure)", why, required)
}

// Required says whether the environment requires what a test needs
// (the variable required is "1", as CI sets it): where it does, a test
// lacking it fails rather than skips. For a test that goes on without one
// of several things and must fail only where that one is required.
func Required(required string) bool { return os.Getenv(required) == "1" }
